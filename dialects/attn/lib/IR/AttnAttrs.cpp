//===- AttnAttrs.cpp - attn attributes ------------------------------------===//

#include "attn/IR/AttnOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/ADT/TypeSwitch.h"

#include "attn_params.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace mlir;
using namespace mlir::attn;

#include "attn/IR/AttnEnums.cpp.inc"

#include "attn/IR/AttnAttrInterfaces.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "attn/IR/AttnAttrs.cpp.inc"

void AttnDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "attn/IR/AttnAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// ProblemAttr
//===----------------------------------------------------------------------===//

/// The shortest decimal form of `value` that parses back to the same double,
/// spelled as an MLIR float literal (always with a '.').
static std::string formatShortestDouble(double value) {
  std::string text;
  for (int precision = 1; precision <= 17; ++precision) {
    char buffer[64];
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    text = buffer;
    if (std::strtod(buffer, nullptr) == value)
      break;
  }
  if (text.find_first_of(".ni") == std::string::npos) {
    size_t exponent = text.find('e');
    text.insert(exponent == std::string::npos ? text.size() : exponent, ".0");
  }
  return text;
}

static bool isSupportedHeadDim(int64_t headDim) {
  return headDim == 64 || headDim == 128 || headDim == 256;
}

LogicalResult
ProblemAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                    int64_t qHeads, int64_t kvHeads, int64_t headDim,
                    Type elementType, FloatAttr scale) {
  if (qHeads <= 0)
    return emitError() << "q_heads must be > 0, got " << qHeads;
  if (qHeads > attn_abi::kMaxHeads)
    return emitError() << "q_heads must be at most " << attn_abi::kMaxHeads
                       << " (a grid dimension holds the heads), got " << qHeads;
  if (kvHeads <= 0)
    return emitError() << "kv_heads must be > 0, got " << kvHeads;
  if (qHeads % kvHeads != 0)
    return emitError() << "kv_heads (" << kvHeads << ") must divide q_heads ("
                       << qHeads << ")";
  if (!isSupportedHeadDim(headDim))
    return emitError() << "unsupported head_dim " << headDim
                       << "; supported: 64, 128, 256";
  if (!elementType || !(elementType.isBF16() || elementType.isF16()))
    return emitError() << "unsupported element_type " << elementType
                       << "; supported: bf16, f16";
  if (scale) {
    double value = scale.getValueAsDouble();
    if (!std::isfinite(value) || value <= 0.0)
      return emitError() << "scale must be positive and finite, got "
                         << formatShortestDouble(value);
    // The kernels multiply by the scale in f32.
    if (value < FLT_MIN || value > FLT_MAX)
      return emitError() << "scale must be a normal f32 value (" << FLT_MIN << " to "
                         << FLT_MAX << "), got " << formatShortestDouble(value);
  }
  return success();
}

double ProblemAttr::getEffectiveScale() const {
  if (FloatAttr scale = getScale())
    return scale.getValueAsDouble();
  return 1.0 / std::sqrt(static_cast<double>(getHeadDim()));
}

int64_t ProblemAttr::getElementBytes() const {
  return getElementType().getIntOrFloatBitWidth() / 8;
}

// `<` q_heads = N `,` kv_heads = N `,` head_dim = N `,` element_type = T
//     (`,` scale = F)? `>`, keys in any order.
Attribute ProblemAttr::parse(AsmParser &parser, Type) {
  MLIRContext *ctx = parser.getContext();
  SMLoc startLoc = parser.getCurrentLocation();
  std::optional<int64_t> qHeads, kvHeads, headDim;
  Type elementType;
  FloatAttr scale;

  auto parseEntry = [&]() -> ParseResult {
    SMLoc keyLoc = parser.getCurrentLocation();
    StringRef key;
    if (parser.parseKeyword(&key) || parser.parseEqual())
      return failure();
    auto parseInt = [&](std::optional<int64_t> &slot) -> ParseResult {
      if (slot)
        return parser.emitError(keyLoc) << "duplicate '" << key << "'";
      int64_t value;
      if (parser.parseInteger(value))
        return failure();
      slot = value;
      return success();
    };
    if (key == "q_heads")
      return parseInt(qHeads);
    if (key == "kv_heads")
      return parseInt(kvHeads);
    if (key == "head_dim")
      return parseInt(headDim);
    if (key == "element_type") {
      if (elementType)
        return parser.emitError(keyLoc) << "duplicate '" << key << "'";
      SMLoc typeLoc = parser.getCurrentLocation();
      OptionalParseResult parsed = parser.parseOptionalType(elementType);
      if (parsed.has_value())
        return *parsed;
      StringRef spelling;
      if (succeeded(parser.parseOptionalKeyword(&spelling)))
        return parser.emitError(typeLoc)
               << "unknown element_type '" << spelling
               << "'; supported: bf16, f16";
      return parser.emitError(typeLoc)
             << "expected an element_type (bf16 or f16)";
    }
    if (key == "scale") {
      if (scale)
        return parser.emitError(keyLoc) << "duplicate '" << key << "'";
      double value;
      if (parser.parseFloat(value))
        return failure();
      scale = FloatAttr::get(Float64Type::get(ctx), value);
      return success();
    }
    return parser.emitError(keyLoc)
           << "unknown #attn.problem key '" << key
           << "'; expected q_heads, kv_heads, head_dim, element_type or scale";
  };
  if (parser.parseLess() ||
      parser.parseCommaSeparatedList(AsmParser::Delimiter::None, parseEntry) ||
      parser.parseGreater())
    return {};

  auto missing = [&](StringRef key) {
    parser.emitError(startLoc) << "#attn.problem is missing '" << key << "'";
    return Attribute();
  };
  if (!qHeads)
    return missing("q_heads");
  if (!kvHeads)
    return missing("kv_heads");
  if (!headDim)
    return missing("head_dim");
  if (!elementType)
    return missing("element_type");
  return parser.getChecked<ProblemAttr>(startLoc, ctx, *qHeads, *kvHeads,
                                        *headDim, elementType, scale);
}

void ProblemAttr::print(AsmPrinter &printer) const {
  printer << "<q_heads = " << getQHeads() << ", kv_heads = " << getKvHeads()
          << ", head_dim = " << getHeadDim()
          << ", element_type = " << getElementType();
  if (FloatAttr scale = getScale())
    printer << ", scale = " << formatShortestDouble(scale.getValueAsDouble());
  printer << ">";
}

//===----------------------------------------------------------------------===//
// Masks
//===----------------------------------------------------------------------===//

/// Diagonal offset of a mask: the key row aligned with query row 0.
static int64_t diagonalShift(MaskAlignment align, int64_t seqlenQ,
                             int64_t seqlenK) {
  return align == MaskAlignment::bottom_right ? seqlenK - seqlenQ : 0;
}

/// Clamps the inclusive key interval [lo, hi] to [0, seqlenK) and returns it
/// half-open.
static std::pair<int64_t, int64_t> clampKeys(int64_t lo, int64_t hi,
                                             int64_t seqlenK) {
  int64_t first = std::max<int64_t>(lo, 0);
  int64_t last = std::min<int64_t>(hi + 1, seqlenK);
  if (last < first)
    last = first;
  return {first, last};
}

StringRef NoMaskAttr::getKindName() const { return "no_mask"; }
bool NoMaskAttr::keeps(int64_t, int64_t, int64_t, int64_t) const {
  return true;
}
std::pair<int64_t, int64_t> NoMaskAttr::getKeyRange(int64_t, int64_t,
                                                    int64_t seqlenK) const {
  return {0, seqlenK};
}
bool NoMaskAttr::isTrivial() const { return true; }

StringRef CausalAttr::getKindName() const { return "causal"; }
bool CausalAttr::keeps(int64_t q, int64_t k, int64_t seqlenQ,
                       int64_t seqlenK) const {
  return k <= q + diagonalShift(getAlignment(), seqlenQ, seqlenK);
}
std::pair<int64_t, int64_t> CausalAttr::getKeyRange(int64_t q,
                                                    int64_t seqlenQ,
                                                    int64_t seqlenK) const {
  int64_t shift = diagonalShift(getAlignment(), seqlenQ, seqlenK);
  return clampKeys(0, q + shift, seqlenK);
}

LogicalResult
SlidingWindowAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                          int64_t left, int64_t right, MaskAlignment) {
  if (left < 0)
    return emitError() << "sliding window left extent must be >= 0, got "
                       << left;
  if (right < 0)
    return emitError() << "sliding window right extent must be >= 0, got "
                       << right;
  // Wider windows keep the same keys (no sequence is longer), and the mask
  // adds the extents to positions in 64 bits.
  for (auto [side, extent] : {std::pair{"left", left}, std::pair{"right", right}})
    if (extent > attn_abi::kMaxSeqlen)
      return emitError() << "sliding window " << side << " extent must be at most "
                         << attn_abi::kMaxSeqlen << " (the longest sequence), got " << extent;
  return success();
}

StringRef SlidingWindowAttr::getKindName() const { return "sliding_window"; }
bool SlidingWindowAttr::keeps(int64_t q, int64_t k, int64_t seqlenQ,
                              int64_t seqlenK) const {
  int64_t center = q + diagonalShift(getAlign(), seqlenQ, seqlenK);
  return center - getLeft() <= k && k <= center + getRight();
}
std::pair<int64_t, int64_t>
SlidingWindowAttr::getKeyRange(int64_t q, int64_t seqlenQ,
                               int64_t seqlenK) const {
  int64_t center = q + diagonalShift(getAlign(), seqlenQ, seqlenK);
  return clampKeys(center - getLeft(), center + getRight(), seqlenK);
}

//===----------------------------------------------------------------------===//
// Normalizers
//===----------------------------------------------------------------------===//

StringRef SoftmaxAttr::getKindName() const { return "softmax"; }
bool SoftmaxAttr::isSoftmax() const { return true; }

StringRef LinearAttr::getKindName() const { return "linear"; }
bool LinearAttr::isLinearFamily() const { return true; }

StringRef RetentionAttr::getKindName() const { return "retention"; }
bool RetentionAttr::isLinearFamily() const { return true; }

double RetentionAttr::getGamma(int64_t head) const {
  if (!getDecayList().empty())
    return getDecayList()[head];
  return 1.0 - std::ldexp(1.0, static_cast<int>(-5 - head));
}

/// The shortest decimal spelling of `value` that reads back as it, so that a
/// diagnostic shows 1.0000001, not a rounded 1.000000e+00.
static std::string roundTripSpelling(double value) {
  char text[40];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value)
      break;
  }
  return text;
}

LogicalResult RetentionAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                    DenseF64ArrayAttr decay, bool gated) {
  if (gated && decay)
    return emitError() << "retention is either gated or has a fixed decay, not both";
  if (decay && decay.empty())
    return emitError() << "retention decay list is empty";
  for (double gamma : decay ? decay.asArrayRef() : ArrayRef<double>())
    if (!(gamma > 0.0 && gamma <= 1.0))
      return emitError() << "retention decay " << roundTripSpelling(gamma)
                         << " must be in (0, 1]";
  return success();
}

// #attn.retention, #attn.retention<gated>, #attn.retention<decay = [...]>;
// both parameters parse (in any order) so that the verifier can say why
// they do not go together.
Attribute RetentionAttr::parse(AsmParser &parser, Type) {
  SmallVector<double> decay;
  bool gated = false, hasDecay = false;
  if (succeeded(parser.parseOptionalLess())) {
    do {
      SMLoc loc = parser.getCurrentLocation();
      if (succeeded(parser.parseOptionalKeyword("gated"))) {
        if (gated) {
          parser.emitError(loc, "retention: 'gated' given twice");
          return {};
        }
        gated = true;
        continue;
      }
      if (failed(parser.parseOptionalKeyword("decay"))) {
        parser.emitError(loc, "retention: expected 'gated' or 'decay = [...]'");
        return {};
      }
      if (hasDecay) {
        parser.emitError(loc, "retention: 'decay' given twice");
        return {};
      }
      hasDecay = true;
      if (parser.parseEqual() ||
          parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&]() {
            double gamma;
            if (parser.parseFloat(gamma))
              return failure();
            decay.push_back(gamma);
            return success();
          }))
        return {};
      if (decay.empty()) {
        parser.emitError(loc, "retention decay list is empty");
        return {};
      }
    } while (succeeded(parser.parseOptionalComma()));
    if (parser.parseGreater())
      return {};
  }
  return getChecked([&] { return parser.emitError(parser.getNameLoc()); },
                    parser.getContext(),
                    decay.empty() ? DenseF64ArrayAttr() : DenseF64ArrayAttr::get(parser.getContext(), decay),
                    gated);
}

void RetentionAttr::print(AsmPrinter &printer) const {
  if (getGated()) {
    printer << "<gated>";
  } else if (!getDecayList().empty()) {
    printer << "<decay = [";
    llvm::interleaveComma(getDecayList(), printer, [&](double gamma) {
      // As short as reads back exactly, and always a float literal.
      std::string text = roundTripSpelling(gamma);
      if (text.find_first_of(".en") == std::string::npos)
        text += ".0";
      printer << text;
    });
    printer << "]>";
  }
}

//===----------------------------------------------------------------------===//
// Shared-memory plan
//===----------------------------------------------------------------------===//

LogicalResult
SmemBufferAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                       StringRef name, int64_t offset, int64_t size,
                       int64_t align, int64_t swizzle, int64_t slots,
                       StringRef aliases) {
  if (name.empty())
    return emitError() << "shared-memory buffer needs a non-empty name";
  if (offset < 0 || size < 0)
    return emitError() << "shared-memory buffer '" << name
                       << "' has negative offset or size";
  if (align <= 0 || !llvm::isPowerOf2_64(align))
    return emitError() << "shared-memory buffer '" << name
                       << "' alignment must be a power of two, got " << align;
  if (offset % align != 0)
    return emitError() << "shared-memory buffer '" << name << "' offset "
                       << offset << " is not a multiple of its alignment "
                       << align;
  if (swizzle != 0 && swizzle != 32 && swizzle != 64 && swizzle != 128)
    return emitError() << "shared-memory buffer '" << name
                       << "' swizzle must be 0, 32, 64 or 128 bytes, got "
                       << swizzle;
  if (slots < 1 || size % slots != 0)
    return emitError() << "shared-memory buffer '" << name << "' size "
                       << size << " is not " << slots << " equal slots";
  return success();
}

LogicalResult
SmemPlanAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                     int64_t total, ArrayAttr buffers) {
  if (!buffers)
    return emitError() << "shared-memory plan needs a buffer list";
  for (Attribute attr : buffers) {
    auto buffer = dyn_cast<SmemBufferAttr>(attr);
    if (!buffer)
      return emitError() << "shared-memory plan buffers must be "
                            "#attn.buffer attributes, got "
                         << attr;
    if (buffer.getEnd() > total)
      return emitError() << "shared-memory buffer '" << buffer.getName()
                         << "' ends at " << buffer.getEnd()
                         << ", past the plan total " << total;
  }
  return success();
}

SmemBufferAttr SmemPlanAttr::lookupBuffer(StringRef name) const {
  for (Attribute attr : getBuffers())
    if (auto buffer = dyn_cast<SmemBufferAttr>(attr))
      if (buffer.getName() == name)
        return buffer;
  return {};
}

SmallVector<SmemBufferAttr> SmemPlanAttr::getBufferList() const {
  return llvm::to_vector(getBuffers().getAsRange<SmemBufferAttr>());
}

//===----------------------------------------------------------------------===//
// CaptureAttr
//===----------------------------------------------------------------------===//

static bool isIdentifier(StringRef name) {
  if (name.empty() || !(llvm::isAlpha(name[0]) || name[0] == '_'))
    return false;
  return llvm::all_of(name, [](char c) { return llvm::isAlnum(c) || c == '_'; });
}

static StringRef captureDimKeyword(CaptureDimKind kind) {
  switch (kind) {
  case CaptureDimKind::fixed:
    return "";
  case CaptureDimKind::any:
    return "?";
  case CaptureDimKind::batch:
    return "batch";
  case CaptureDimKind::q_heads:
    return "q_heads";
  case CaptureDimKind::kv_heads:
    return "kv_heads";
  case CaptureDimKind::seqlen_q:
    return "seqlen_q";
  case CaptureDimKind::seqlen_k:
    return "seqlen_k";
  }
  llvm_unreachable("unknown capture dim kind");
}

// #attn.capture<"name", type, [extent, ...]>
Attribute CaptureAttr::parse(AsmParser &parser, Type) {
  std::string name;
  Type elementType;
  SmallVector<CaptureDimKind> kinds;
  SmallVector<int64_t> sizes;
  if (parser.parseLess() || parser.parseString(&name) || parser.parseComma() ||
      parser.parseType(elementType) || parser.parseComma())
    return {};
  auto parseExtent = [&]() -> ParseResult {
    SMLoc loc = parser.getCurrentLocation();
    if (succeeded(parser.parseOptionalQuestion())) {
      kinds.push_back(CaptureDimKind::any);
      sizes.push_back(0);
      return success();
    }
    int64_t size;
    OptionalParseResult integer = parser.parseOptionalInteger(size);
    if (integer.has_value()) {
      if (failed(*integer))
        return failure();
      kinds.push_back(CaptureDimKind::fixed);
      sizes.push_back(size);
      return success();
    }
    StringRef keyword;
    if (parser.parseOptionalKeyword(&keyword))
      return parser.emitError(loc, "expected an extent: an integer, '?', batch, "
                                   "q_heads, kv_heads, seqlen_q or seqlen_k");
    std::optional<CaptureDimKind> kind = symbolizeCaptureDimKind(keyword);
    if (!kind || *kind == CaptureDimKind::fixed)
      return parser.emitError(loc) << "unknown extent '" << keyword
                                   << "'; expected an integer, '?', batch, q_heads, "
                                      "kv_heads, seqlen_q or seqlen_k";
    kinds.push_back(*kind);
    sizes.push_back(0);
    return success();
  };
  if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, parseExtent))
    return {};
  bool requiresGrad = false;
  if (succeeded(parser.parseOptionalComma())) {
    if (parser.parseKeyword("grad"))
      return {};
    requiresGrad = true;
  }
  if (parser.parseGreater())
    return {};
  return getChecked([&] { return parser.emitError(parser.getNameLoc()); },
                    parser.getContext(), name, elementType, kinds, sizes, requiresGrad);
}

void CaptureAttr::print(AsmPrinter &printer) const {
  printer << "<\"";
  printer << getName() << "\", " << getElementType() << ", [";
  llvm::interleaveComma(llvm::zip(getDimKinds(), getDimSizes()), printer, [&](auto dim) {
    auto [kind, size] = dim;
    if (kind == CaptureDimKind::fixed)
      printer << size;
    else
      printer << captureDimKeyword(kind);
  });
  printer << "]";
  if (getRequiresGrad())
    printer << ", grad";
  printer << ">";
}

LogicalResult CaptureAttr::verify(function_ref<InFlightDiagnostic()> emitError, StringRef name,
                                  Type elementType, ArrayRef<CaptureDimKind> kinds,
                                  ArrayRef<int64_t> sizes, bool requiresGrad) {
  if (!isIdentifier(name))
    return emitError() << "capture name '" << name
                       << "' must be an identifier ([A-Za-z_][A-Za-z0-9_]*)";
  if (!elementType || !(elementType.isF32() || elementType.isSignlessInteger(32)))
    return emitError() << "capture '" << name << "': unsupported element type " << elementType
                       << "; supported: f32, i32";
  if (requiresGrad && !elementType.isF32())
    return emitError() << "capture '" << name << "': only an f32 capture has a gradient, got "
                       << elementType;
  if (kinds.size() != sizes.size())
    return emitError() << "capture '" << name << "': extent kinds and sizes differ in length";
  if (kinds.empty() || static_cast<int64_t>(kinds.size()) > kMaxRank)
    return emitError() << "capture '" << name << "': rank must be 1 to " << kMaxRank << ", got "
                       << kinds.size();
  for (auto [index, dim] : llvm::enumerate(llvm::zip(kinds, sizes))) {
    auto [kind, size] = dim;
    if (kind == CaptureDimKind::fixed && size <= 0)
      return emitError() << "capture '" << name << "': extent #" << index
                         << " must be positive, got " << size;
  }
  return success();
}

MemRefType CaptureAttr::getRegionArgType() const {
  SmallVector<int64_t> shape(getRank(), ShapedType::kDynamic);
  return MemRefType::get(shape, getElementType());
}

//===----------------------------------------------------------------------===//
// TileFormulaAttr
//===----------------------------------------------------------------------===//

LogicalResult TileFormulaAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                      TileFormulaKind kind, ArrayAttr terms) {
  if (!terms)
    return emitError() << "tile formula needs a list of terms";
  for (Attribute term : terms)
    if (!isa<AffineGeAttr, DivSumGeAttr, TileFormulaAttr>(term))
      return emitError() << "tile formula terms must be #attn.affine_ge, #attn.div_sum_ge or "
                            "#attn.tile_formula, got "
                         << term;
  return success();
}

LogicalResult FloorDivTermAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t,
                                       int64_t, int64_t, int64_t, int64_t, int64_t,
                                       int64_t divisor) {
  if (divisor <= 0)
    return emitError() << "floordiv divisor must be positive, got " << divisor;
  return success();
}

LogicalResult DivSumGeAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t,
                                   int64_t, int64_t, int64_t, int64_t, ArrayAttr terms) {
  if (!terms)
    return emitError() << "div_sum_ge needs a list of terms";
  for (Attribute term : terms)
    if (!isa<FloorDivTermAttr>(term))
      return emitError() << "div_sum_ge terms must be #attn.floordiv, got " << term;
  return success();
}
