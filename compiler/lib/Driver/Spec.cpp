//===- Spec.cpp - Attention kernel specs built from C++ -------------------===//

#include "attn/Compiler/Spec.h"

#include "attn/runtime/Error.h"

#include <fmt/format.h>

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
  std::string text =
      fmt::format("attn-spec 1\nname {}\nq_heads {}\nkv_heads {}\nhead_dim {}\ndtype {}\nscale ",
                  name, qHeads, kvHeads, headDim, dtypeName(dtype));
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
    text += fmt::format("sliding_window {} {} {}", mask.windowLeft(), mask.windowRight(),
                        alignName(mask.alignment()));
    break;
  }
  text += "\nnormalizer ";
  switch (normalizer.kind()) {
  case Normalizer::Kind::Softmax:
    text += "softmax";
    break;
  case Normalizer::Kind::Linear:
    text += fmt::format("linear {}{}", static_cast<int>(normalizer.featureMap()),
                        normalizer.normalize() ? " normalize" : "");
    break;
  case Normalizer::Kind::Retention:
    text += normalizer.gated() ? "retention gated" : "retention";
    for (double gamma : normalizer.decays()) {
      char hex[64];
      std::snprintf(hex, sizeof(hex), " %a", gamma);
      text += hex;
    }
    break;
  }
  text += "\n";
  for (const Capture &capture : captures) {
    // Length-prefixed, so no name can read as another field.
    text += fmt::format("capture {}:{} {}", capture.name().size(), capture.name(),
                        dtypeName(capture.dtype()));
    for (const CaptureExtent &extent : capture.extents())
      text += fmt::format(" {}:{}", static_cast<int>(extent.kind()), extent.size());
    text += "\n";
  }
  if (maskMod)
    text += "mask_mod\n" + exprFingerprint(*maskMod);
  if (scoreMod)
    text += "score_mod\n" + exprFingerprint(*scoreMod);
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

SpecBuilder &SpecBuilder::capture(Capture capture) {
  spec.captures.push_back(std::move(capture));
  return *this;
}

SpecBuilder &SpecBuilder::maskMod(Expr keep) {
  if (keep.type() != ExprType::Bool)
    throw Error("SpecBuilder(\"" + spec.name + "\").maskMod: needs a bool expression, got " +
                exprTypeName(keep.type()));
  if (exprContains(keep, Expr::Op::Score))
    throw Error("SpecBuilder(\"" + spec.name +
                "\").maskMod: the score is not known to a mask (use scoreMod)");
  spec.maskMod = std::move(keep);
  return *this;
}

SpecBuilder &SpecBuilder::scoreMod(Expr score) {
  if (score.type() == ExprType::Bool)
    throw Error("SpecBuilder(\"" + spec.name +
                "\").scoreMod: needs an f32 expression, got bool (use select)");
  if (score.type() == ExprType::Index)
    score = Expr::make(Expr::Op::ToF32, {score});
  spec.scoreMod = std::move(score);
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
