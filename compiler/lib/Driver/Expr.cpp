//===- Expr.cpp - Mask and score expressions for SpecBuilder --------------===//

#include "attn/Compiler/Expr.h"

#include "attn/runtime/Error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <unordered_map>
#include <unordered_set>

namespace attn {

struct Expr::Node {
  Op op;
  ExprType type;
  std::vector<Expr> operands;
  int64_t index = 0;
  double f32 = 0.0;
  bool boolean = false;
  std::string captureName;
  DType captureDType = DType::F32;
  /// Longest path to a leaf; bounded so that lowering and printing, which
  /// recurse, cannot exhaust the stack.
  unsigned depth = 0;
};

/// The deepest expression make() builds.
static constexpr unsigned kMaxExprDepth = 2000;

const char *exprTypeName(ExprType type) {
  switch (type) {
  case ExprType::Index:
    return "index";
  case ExprType::Bool:
    return "bool";
  case ExprType::F32:
    return "f32";
  }
  return "?";
}

namespace {
using Op = Expr::Op;

const char *opName(Op op) {
  switch (op) {
  case Op::Batch: return "batch";
  case Op::Head: return "head";
  case Op::QIdx: return "q_idx";
  case Op::KvIdx: return "kv_idx";
  case Op::Score: return "score";
  case Op::IndexConst: return "index";
  case Op::BoolConst: return "bool";
  case Op::F32Const: return "f32";
  case Op::Load: return "load";
  case Op::Add: return "+";
  case Op::Sub: return "-";
  case Op::Mul: return "*";
  case Op::Div: return "/";
  case Op::Rem: return "%";
  case Op::Min: return "min";
  case Op::Max: return "max";
  case Op::Neg: return "neg";
  case Op::Abs: return "abs";
  case Op::Eq: return "==";
  case Op::Ne: return "!=";
  case Op::Lt: return "<";
  case Op::Le: return "<=";
  case Op::Gt: return ">";
  case Op::Ge: return ">=";
  case Op::And: return "&&";
  case Op::Or: return "||";
  case Op::Not: return "!";
  case Op::Select: return "select";
  case Op::Exp: return "exp";
  case Op::Log: return "log";
  case Op::Sqrt: return "sqrt";
  case Op::Tanh: return "tanh";
  case Op::ToF32: return "to_f32";
  }
  return "?";
}

[[noreturn]] void typeError(Op op, const std::vector<Expr> &operands, const std::string &wanted) {
  std::string got;
  for (const Expr &operand : operands)
    got += std::string(got.empty() ? "" : ", ") + exprTypeName(operand.type());
  throw Error(std::string("Expr '") + opName(op) + "': " + wanted + ", got (" + got + ")");
}

bool isNumber(const Expr &e) { return e.type() != ExprType::Bool; }

// Index operands of an operation that also has an f32 operand become f32.
void promoteMixed(std::vector<Expr> &operands, size_t first) {
  bool anyF32 = false;
  for (size_t i = first; i < operands.size(); ++i)
    anyF32 |= operands[i].type() == ExprType::F32;
  if (!anyF32)
    return;
  for (size_t i = first; i < operands.size(); ++i)
    if (operands[i].type() == ExprType::Index)
      operands[i] = Expr::make(Op::ToF32, {operands[i]});
}
} // namespace

Expr::Expr(int value) : Expr(static_cast<long>(value)) {}

Expr::Expr(long value) {
  auto n = std::make_shared<Node>();
  n->op = Op::IndexConst;
  n->type = ExprType::Index;
  n->index = value;
  node = std::move(n);
}

Expr::Expr(double value) {
  auto n = std::make_shared<Node>();
  n->op = Op::F32Const;
  n->type = ExprType::F32;
  n->f32 = static_cast<float>(value);
  node = std::move(n);
}

Expr::Expr(float value) : Expr(static_cast<double>(value)) {}

Expr Expr::batch() { return make(Op::Batch, {}); }
Expr Expr::head() { return make(Op::Head, {}); }
Expr Expr::qIdx() { return make(Op::QIdx, {}); }
Expr Expr::kvIdx() { return make(Op::KvIdx, {}); }
Expr Expr::score() { return make(Op::Score, {}); }

Expr Expr::boolean(bool value) {
  auto n = std::make_shared<Node>();
  n->op = Op::BoolConst;
  n->type = ExprType::Bool;
  n->boolean = value;
  return Expr(std::move(n));
}

ExprType Expr::type() const { return node->type; }
Expr::Op Expr::op() const { return node->op; }
const std::vector<Expr> &Expr::operands() const { return node->operands; }
int64_t Expr::indexValue() const { return node->index; }
double Expr::f32Value() const { return node->f32; }
bool Expr::boolValue() const { return node->boolean; }
const std::string &Expr::captureName() const { return node->captureName; }
DType Expr::captureDType() const { return node->captureDType; }
const void *Expr::id() const { return node.get(); }

Expr Expr::make(Op op, std::vector<Expr> operands) {
  auto n = std::make_shared<Node>();
  n->op = op;
  auto arity = [&](size_t count) {
    if (operands.size() != count)
      throw Error(fmt::format("Expr '{}': takes {} operands, got {}", opName(op), count,
                              operands.size()));
  };
  switch (op) {
  case Op::Batch:
  case Op::Head:
  case Op::QIdx:
  case Op::KvIdx:
    arity(0);
    n->type = ExprType::Index;
    break;
  case Op::Score:
    arity(0);
    n->type = ExprType::F32;
    break;
  case Op::IndexConst:
  case Op::BoolConst:
  case Op::F32Const:
  case Op::Load:
    throw Error(std::string("Expr '") + opName(op) + "': built by its own constructor");
  case Op::Add:
  case Op::Sub:
  case Op::Mul:
  case Op::Div:
  case Op::Rem:
  case Op::Min:
  case Op::Max:
    arity(2);
    if (!isNumber(operands[0]) || !isNumber(operands[1]))
      typeError(op, operands, "needs index or f32 operands");
    promoteMixed(operands, 0);
    n->type = operands[0].type();
    break;
  case Op::Neg:
  case Op::Abs:
    arity(1);
    if (!isNumber(operands[0]))
      typeError(op, operands, "needs an index or f32 operand");
    n->type = operands[0].type();
    break;
  case Op::Eq:
  case Op::Ne:
  case Op::Lt:
  case Op::Le:
  case Op::Gt:
  case Op::Ge:
    arity(2);
    if (operands[0].type() == ExprType::Bool && operands[1].type() == ExprType::Bool &&
        (op == Op::Eq || op == Op::Ne)) {
      n->type = ExprType::Bool;
      break;
    }
    if (!isNumber(operands[0]) || !isNumber(operands[1]))
      typeError(op, operands, "compares index or f32 operands (or two bools with == and !=)");
    promoteMixed(operands, 0);
    n->type = ExprType::Bool;
    break;
  case Op::And:
  case Op::Or:
    arity(2);
    if (operands[0].type() != ExprType::Bool || operands[1].type() != ExprType::Bool)
      typeError(op, operands, "needs bool operands");
    n->type = ExprType::Bool;
    break;
  case Op::Not:
    arity(1);
    if (operands[0].type() != ExprType::Bool)
      typeError(op, operands, "needs a bool operand");
    n->type = ExprType::Bool;
    break;
  case Op::Select:
    arity(3);
    if (operands[0].type() != ExprType::Bool)
      typeError(op, operands, "needs a bool condition");
    promoteMixed(operands, 1);
    if (operands[1].type() != operands[2].type())
      typeError(op, operands, "needs branches of one type");
    n->type = operands[1].type();
    break;
  case Op::Exp:
  case Op::Log:
  case Op::Sqrt:
  case Op::Tanh:
    arity(1);
    if (!isNumber(operands[0]))
      typeError(op, operands, "needs an f32 (or index) operand");
    if (operands[0].type() == ExprType::Index)
      operands[0] = make(Op::ToF32, {operands[0]});
    n->type = ExprType::F32;
    break;
  case Op::ToF32:
    arity(1);
    if (operands[0].type() != ExprType::Index)
      typeError(op, operands, "needs an index operand");
    n->type = ExprType::F32;
    break;
  }
  for (const Expr &operand : operands)
    n->depth = std::max(n->depth, operand.node->depth + 1);
  if (n->depth > kMaxExprDepth)
    throw Error(
        fmt::format("Expr '{}': nested deeper than {} operations", opName(op), kMaxExprDepth));
  n->operands = std::move(operands);
  return Expr(std::move(n));
}

Capture::Capture(std::string name, DType dtype, std::vector<CaptureExtent> extents)
    : captureName(std::move(name)), elementType(dtype), captureExtents(std::move(extents)) {}

Expr Capture::operator()(std::vector<Expr> indices) const {
  if (indices.size() != captureExtents.size())
    throw Error(fmt::format("capture '{}': read with {} indices, but it has {} extents",
                            captureName, indices.size(), captureExtents.size()));
  for (const Expr &index : indices)
    if (index.type() != ExprType::Index)
      throw Error("capture '" + captureName + "': indices must be index expressions, got " +
                  exprTypeName(index.type()));
  auto n = std::make_shared<Expr::Node>();
  n->op = Expr::Op::Load;
  n->type = elementType == DType::F32 ? ExprType::F32 : ExprType::Index;
  for (const Expr &index : indices)
    n->depth = std::max(n->depth, index.node->depth + 1);
  if (n->depth > kMaxExprDepth)
    throw Error(fmt::format("capture '{}': read nested deeper than {} operations", captureName,
                            kMaxExprDepth));
  n->operands = std::move(indices);
  n->captureName = captureName;
  n->captureDType = elementType;
  return Expr(std::move(n));
}

bool exprContains(const Expr &root, Expr::Op op) {
  std::unordered_set<const void *> seen;
  std::vector<Expr> pending{root};
  while (!pending.empty()) {
    Expr e = pending.back();
    pending.pop_back();
    if (!seen.insert(e.id()).second)
      continue;
    if (e.op() == op)
      return true;
    for (const Expr &operand : e.operands())
      pending.push_back(operand);
  }
  return false;
}

std::string exprFingerprint(const Expr &root) {
  std::unordered_map<const void *, size_t> numbers;
  std::string text;
  auto visit = [&](auto &self, const Expr &e) -> size_t {
    auto found = numbers.find(e.id());
    if (found != numbers.end())
      return found->second;
    std::vector<size_t> operandNumbers;
    for (const Expr &operand : e.operands())
      operandNumbers.push_back(self(self, operand));
    size_t number = numbers.size();
    numbers.emplace(e.id(), number);
    text += fmt::format("%{} = {} {}", number, opName(e.op()), exprTypeName(e.type()));
    switch (e.op()) {
    case Op::IndexConst:
      text += fmt::format(" {}", e.indexValue());
      break;
    case Op::F32Const: {
      char hex[64];
      std::snprintf(hex, sizeof(hex), " %a", e.f32Value());
      text += hex;
      break;
    }
    case Op::BoolConst:
      text += e.boolValue() ? " true" : " false";
      break;
    case Op::Load:
      // Length-prefixed, so no name can read as another field.
      text += fmt::format(" {}:{} {}", e.captureName().size(), e.captureName(),
                          dtypeName(e.captureDType()));
      break;
    default:
      break;
    }
    for (size_t operand : operandNumbers)
      text += fmt::format(" %{}", operand);
    text += "\n";
    return number;
  };
  visit(visit, root);
  return text;
}

} // namespace attn
