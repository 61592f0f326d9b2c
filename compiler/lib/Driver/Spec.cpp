//===- Spec.cpp - Attention kernel specs built from C++ -------------------===//

#include "attn/Compiler/Spec.h"

#include "attn/runtime/Error.h"

#include <cstdio>

namespace attn {

namespace {
const char *alignName(CausalAlign align) {
  return align == CausalAlign::TopLeft ? "top_left" : "bottom_right";
}

// MLIR's bare identifiers, so the name prints as @name and is safe inside the
// emitted CUDA unit's comments.
bool isIdentifier(const std::string &name) {
  auto isLetter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  if (name.empty() || !(isLetter(name[0]) || name[0] == '_'))
    return false;
  for (char c : name)
    if (!(isLetter(c) || (c >= '0' && c <= '9') || c == '_' || c == '$' || c == '.'))
      return false;
  return true;
}
} // namespace

void Spec::validate() const {
  if (!isIdentifier(name))
    throw Error("spec name '" + name +
                "': must be an identifier ([A-Za-z_][A-Za-z0-9_$.]*)");
}

std::string Spec::fingerprint() const {
  std::string text = "attn-spec 1\nname " + name + "\nq_heads " + std::to_string(qHeads) +
                     "\nkv_heads " + std::to_string(kvHeads) + "\nhead_dim " +
                     std::to_string(headDim) + "\ndtype " + dtypeName(dtype) + "\nscale ";
  if (scale) {
    char hex[64];
    std::snprintf(hex, sizeof(hex), "%a", *scale);
    text += hex;
  } else {
    text += "default";
  }
  text += "\nmask ";
  switch (mask.kind()) {
  case Mask::Kind::None:
    text += "none";
    break;
  case Mask::Kind::Causal:
    text += std::string("causal ") + alignName(mask.alignment());
    break;
  case Mask::Kind::SlidingWindow:
    text += "sliding_window " + std::to_string(mask.windowLeft()) + " " +
            std::to_string(mask.windowRight()) + " " + alignName(mask.alignment());
    break;
  }
  text += "\nnormalizer softmax\n";
  return text;
}

SpecBuilder::SpecBuilder(std::string name) { spec.name = std::move(name); }

SpecBuilder &SpecBuilder::heads(int64_t qHeads, int64_t kvHeads) {
  spec.qHeads = qHeads;
  spec.kvHeads = kvHeads;
  headsSet = true;
  return *this;
}

SpecBuilder &SpecBuilder::headDim(int64_t headDim) {
  spec.headDim = headDim;
  headDimSet = true;
  return *this;
}

SpecBuilder &SpecBuilder::dtype(DType dtype) {
  spec.dtype = dtype;
  return *this;
}

SpecBuilder &SpecBuilder::scale(double scale) {
  spec.scale = scale;
  return *this;
}

SpecBuilder &SpecBuilder::mask(Mask mask) {
  spec.mask = mask;
  return *this;
}

SpecBuilder &SpecBuilder::normalizer(Normalizer normalizer) {
  spec.normalizer = normalizer;
  return *this;
}

Spec SpecBuilder::build() const {
  std::string prefix = "SpecBuilder(\"" + spec.name + "\"): ";
  if (!headsSet)
    throw Error(prefix + "heads(q, kv) was not called");
  if (!headDimSet)
    throw Error(prefix + "headDim(d) was not called");
  spec.validate();
  return spec;
}

} // namespace attn
