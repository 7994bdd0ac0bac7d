/* The op table: each elementwise op declared once.
 *
 * A row names the op (its Lua function and method, and the stem of its
 * formulas in ops/scalar_math_t.h: dp_<name>_fwd, dp_<name>_bwd, and
 * dp_<name>_i64 for ops that keep integer dtypes), its autograd node, and
 * the facts the rest of the runtime needs. Everything else is generated
 * from these lists: the enums, the dp_op_info tables below, the per-op
 * switches of the shared formulas (so the CPU kernels and the CUDA
 * kernels dispatch alike), the CPU's vectorised float32 loops, the op
 * layer's dtype rules and saved tensors, and the Lua bindings (l_ops.c).
 * Adding an elementwise op: docs/adding_an_op.md.
 *
 * Plain C that nvcc also reads as C++ (no designated initialisers). */
#ifndef DP_OP_TABLE_H
#define DP_OP_TABLE_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
#define DP_STATIC_ASSERT(c, msg) static_assert(c, msg)
#else
#define DP_STATIC_ASSERT(c, msg) _Static_assert(c, msg)
#endif

/* ---- column values ----
 * grad:     the saved tensor the backward formula reads: GRAD_X (the input), GRAD_Y (the output), GRAD_NONE.
 * ints:     integer inputs: INT_TO_FLOAT (give float32, as PyTorch's math functions), INT_KEEP (keep the dtype,
 *           exact in int64), INT_KEEP_IF_WHOLE (keep it when every parameter is a whole number or infinite, like a
 *           weakly typed Lua number; else float32), INT_ERROR (an error naming the dtype, as PyTorch's activations).
 * epilogue: EPILOGUE when linear can fuse it after the GEMM (its backward must then read only y, which is what
 *           linear saves), else NO_EPILOGUE. */

/* X(ID, name, autograd node, grad, ints, epilogue) */
// clang-format off
#define DP_UNARY_OPS(X)                                                                         \
  X(NEG,         neg,         "NegBackward",         GRAD_NONE, INT_KEEP,          NO_EPILOGUE) \
  X(EXP,         exp,         "ExpBackward",         GRAD_Y,    INT_TO_FLOAT,      NO_EPILOGUE) \
  X(LOG,         log,         "LogBackward",         GRAD_X,    INT_TO_FLOAT,      NO_EPILOGUE) \
  X(RELU,        relu,        "ReluBackward",        GRAD_Y,    INT_KEEP,          EPILOGUE)    \
  X(GELU,        gelu,        "GeluBackward",        GRAD_X,    INT_ERROR,         NO_EPILOGUE) \
  X(TANH,        tanh,        "TanhBackward",        GRAD_Y,    INT_TO_FLOAT,      EPILOGUE)    \
  X(SIGMOID,     sigmoid,     "SigmoidBackward",     GRAD_Y,    INT_TO_FLOAT,      EPILOGUE)    \
  X(SQRT,        sqrt,        "SqrtBackward",        GRAD_Y,    INT_TO_FLOAT,      NO_EPILOGUE) \
  X(RSQRT,       rsqrt,       "RsqrtBackward",       GRAD_Y,    INT_TO_FLOAT,      NO_EPILOGUE) \
  X(ABS,         abs,         "AbsBackward",         GRAD_X,    INT_KEEP,          NO_EPILOGUE) \
  X(SQUARE,      square,      "SquareBackward",      GRAD_X,    INT_KEEP,          NO_EPILOGUE) \
  X(RECIP,       reciprocal,  "ReciprocalBackward",  GRAD_Y,    INT_TO_FLOAT,      NO_EPILOGUE) \
  X(SIGN,        sign,        "SignBackward",        GRAD_NONE, INT_KEEP,          NO_EPILOGUE) \
  X(CLAMP,       clamp,       "ClampBackward",       GRAD_X,    INT_KEEP_IF_WHOLE, NO_EPILOGUE) \
  X(LEAKY_RELU,  leaky_relu,  "LeakyReluBackward",   GRAD_X,    INT_ERROR,         NO_EPILOGUE) \
  X(ELU,         elu,         "EluBackward",         GRAD_X,    INT_ERROR,         NO_EPILOGUE) \
  X(SILU,        silu,        "SiluBackward",        GRAD_X,    INT_ERROR,         NO_EPILOGUE) \
  X(SOFTPLUS,    softplus,    "SoftplusBackward",    GRAD_X,    INT_ERROR,         NO_EPILOGUE) \
  X(SIN,         sin,         "SinBackward",         GRAD_X,    INT_TO_FLOAT,      NO_EPILOGUE) \
  X(COS,         cos,         "CosBackward",         GRAD_X,    INT_TO_FLOAT,      NO_EPILOGUE) \
  X(ERF,         erf,         "ErfBackward",         GRAD_X,    INT_TO_FLOAT,      NO_EPILOGUE) \
  X(LOG1P,       log1p,       "Log1pBackward",       GRAD_X,    INT_TO_FLOAT,      NO_EPILOGUE) \
  X(EXPM1,       expm1,       "Expm1Backward",       GRAD_Y,    INT_TO_FLOAT,      NO_EPILOGUE) \
  X(FLOOR,       floor,       "FloorBackward",       GRAD_NONE, INT_KEEP,          NO_EPILOGUE) \
  X(CEIL,        ceil,        "CeilBackward",        GRAD_NONE, INT_KEEP,          NO_EPILOGUE) \
  X(ROUND,       round,       "RoundBackward",       GRAD_NONE, INT_KEEP,          NO_EPILOGUE) \
  X(TRUNC,       trunc,       "TruncBackward",       GRAD_NONE, INT_KEEP,          NO_EPILOGUE) \
  X(HARDTANH,    hardtanh,    "HardtanhBackward",    GRAD_X,    INT_KEEP_IF_WHOLE, NO_EPILOGUE) \
  X(HARDSIGMOID, hardsigmoid, "HardsigmoidBackward", GRAD_X,    INT_ERROR,         NO_EPILOGUE) \
  X(HARDSWISH,   hardswish,   "HardswishBackward",   GRAD_X,    INT_ERROR,         NO_EPILOGUE) \
  X(MISH,        mish,        "MishBackward",        GRAD_X,    INT_ERROR,         NO_EPILOGUE) \
  X(SELU,        selu,        "EluBackward",         GRAD_X,    INT_ERROR,         NO_EPILOGUE) \
  X(CELU,        celu,        "CeluBackward",        GRAD_X,    INT_ERROR,         NO_EPILOGUE) \
  X(LOGSIGMOID,  logsigmoid,  "LogSigmoidBackward",  GRAD_X,    INT_ERROR,         NO_EPILOGUE) \
  X(SOFTSIGN,    softsign,    "SoftsignBackward",    GRAD_X,    INT_TO_FLOAT,      NO_EPILOGUE) \
  X(TANHSHRINK,  tanhshrink,  "TanhshrinkBackward",  GRAD_X,    INT_TO_FLOAT,      NO_EPILOGUE) \
  X(SOFTSHRINK,  softshrink,  "SoftshrinkBackward",  GRAD_X,    INT_ERROR,         NO_EPILOGUE) \
  X(HARDSHRINK,  hardshrink,  "HardshrinkBackward",  GRAD_X,    INT_ERROR,         NO_EPILOGUE) \
  X(THRESHOLD,   threshold,   "ThresholdBackward",   GRAD_X,    INT_KEEP_IF_WHOLE, NO_EPILOGUE) \
  X(GELU_TANH,   gelu_tanh,   "GeluBackward",        GRAD_X,    INT_ERROR,         NO_EPILOGUE) \
  X(TAN,         tan,         "TanBackward",         GRAD_Y,    INT_TO_FLOAT,      NO_EPILOGUE) \
  X(ASIN,        asin,        "AsinBackward",        GRAD_X,    INT_TO_FLOAT,      NO_EPILOGUE) \
  X(ACOS,        acos,        "AcosBackward",        GRAD_X,    INT_TO_FLOAT,      NO_EPILOGUE) \
  X(ATAN,        atan,        "AtanBackward",        GRAD_X,    INT_TO_FLOAT,      NO_EPILOGUE) \
  X(SINH,        sinh,        "SinhBackward",        GRAD_X,    INT_TO_FLOAT,      NO_EPILOGUE) \
  X(COSH,        cosh,        "CoshBackward",        GRAD_X,    INT_TO_FLOAT,      NO_EPILOGUE) \
  X(ASINH,       asinh,       "AsinhBackward",       GRAD_X,    INT_TO_FLOAT,      NO_EPILOGUE) \
  X(ACOSH,       acosh,       "AcoshBackward",       GRAD_X,    INT_TO_FLOAT,      NO_EPILOGUE) \
  X(ATANH,       atanh,       "AtanhBackward",       GRAD_X,    INT_TO_FLOAT,      NO_EPILOGUE) \
  X(LOG2,        log2,        "Log2Backward",        GRAD_X,    INT_TO_FLOAT,      NO_EPILOGUE) \
  X(LOG10,       log10,       "Log10Backward",       GRAD_X,    INT_TO_FLOAT,      NO_EPILOGUE) \
  X(EXP2,        exp2,        "Exp2Backward",        GRAD_Y,    INT_TO_FLOAT,      NO_EPILOGUE) \
  /* internal (a leading _: core only, no method): the losses' elementwise forms on d = input - target */ \
  X(SMOOTH_L1,   _smooth_l1,  "SmoothL1LossBackward", GRAD_X,   INT_ERROR,         NO_EPILOGUE) \
  X(HUBER,       _huber,      "HuberLossBackward",   GRAD_X,    INT_ERROR,         NO_EPILOGUE)

/* The parameters of the unary ops that take some, in Lua argument order
 * (ddp.clamp(x, min, max)): P(ID, field of dp_unary_params, Lua default).
 * A NaN default marks a parameter PyTorch requires (threshold's): the nn
 * forms refuse a missing one (nn/activation.lua). */
#define DP_UNARY_PARAMS(P)                 \
  P(CLAMP,      min,            -INFINITY) \
  P(CLAMP,      max,            INFINITY)  \
  P(LEAKY_RELU, negative_slope, 0.01)      \
  P(ELU,        alpha,          1.0)       \
  P(SOFTPLUS,   beta,           1.0)       \
  P(SOFTPLUS,   threshold,      20.0)      \
  P(HARDTANH,   min_val,        -1.0)      \
  P(HARDTANH,   max_val,        1.0)       \
  P(CELU,       alpha,          1.0)       \
  P(SOFTSHRINK, lambd,          0.5)       \
  P(HARDSHRINK, lambd,          0.5)       \
  P(THRESHOLD,  threshold,      NAN)       \
  P(THRESHOLD,  value,          NAN)       \
  P(SMOOTH_L1,  beta,           1.0)       \
  P(HUBER,      delta,          1.0)

/* Where the fields live: F(field, slot). An autograd node keeps the
 * parameters in 8 doubles, fewer than all the ops' fields together, so
 * the fields of different ops share DP_UNARY_PARAM_SLOTS slots: each field
 * is declared once here, in a slot that no other field of the same op
 * uses (tests/c/test_scalar_math.c checks it); ops whose parameters have
 * the same name share the field (elu's and celu's alpha, softplus's and
 * threshold's threshold). A parameter with a new name needs its line. */
#define DP_UNARY_PARAM_FIELDS(F)                                                                 \
  F(min, 0) F(max, 1) F(negative_slope, 0) F(alpha, 0) F(beta, 0) F(threshold, 1) F(min_val, 0) \
  F(max_val, 1) F(lambd, 0) F(value, 0) F(delta, 0)
#define DP_UNARY_PARAM_SLOTS 2

/* X(ID, name, autograd node (NULL: no gradient), out, saves, scalar_f32)
 * out:        the result dtype: OUT_PROMOTE (PyTorch's result type of the operands, dp_result_type), OUT_FLOAT
 *             (promoted, integers give float32; no int64 formula), OUT_BOOL (uint8 0/1, no gradient).
 * saves:      what the backward reads: SAVES_NONE, SAVES_AB (both operands), SAVES_ABY (and the output).
 * scalar_f32: 1 when a float32 tensor combines with a Lua number rounded to float32 (+ - * /: the vectorised
 *             path); 0 when it sees the exact number (comparisons against 0.1 must not round it). */
#define DP_BINARY_OPS(X)                                         \
  X(ADD, add,     "AddBackward",     OUT_PROMOTE, SAVES_NONE, 1) \
  X(SUB, sub,     "SubBackward",     OUT_PROMOTE, SAVES_NONE, 1) \
  X(MUL, mul,     "MulBackward",     OUT_PROMOTE, SAVES_AB,   1) \
  X(DIV, div,     "DivBackward",     OUT_FLOAT,   SAVES_ABY,  1) \
  X(MAX, maximum, "MaximumBackward", OUT_PROMOTE, SAVES_AB,   0) \
  X(MIN, minimum, "MinimumBackward", OUT_PROMOTE, SAVES_AB,   0) \
  X(POW, pow,     "PowBackward",     OUT_PROMOTE, SAVES_ABY,  0) \
  X(EQ,  eq,      NULL,              OUT_BOOL,    SAVES_NONE, 0) \
  X(NE,  ne,      NULL,              OUT_BOOL,    SAVES_NONE, 0) \
  X(LT,  lt,      NULL,              OUT_BOOL,    SAVES_NONE, 0) \
  X(LE,  le,      NULL,              OUT_BOOL,    SAVES_NONE, 0) \
  X(GT,  gt,      NULL,              OUT_BOOL,    SAVES_NONE, 0) \
  X(GE,  ge,      NULL,              OUT_BOOL,    SAVES_NONE, 0) \
  /* internal (no Lua name): pow's two partial derivatives, PyTorch's */  \
  /* formulas with their zero-base cases (elementwise.c)               */  \
  X(POW_DBASE, pow_grad_base, NULL,  OUT_FLOAT,   SAVES_NONE, 0) \
  X(POW_DEXP,  pow_grad_exp,  NULL,  OUT_FLOAT,   SAVES_NONE, 0) \
  /* a where b != 0, else 0 (PyTorch's where(b == 0, 0, a): no 0 * inf) */ \
  X(KEEP_NZ,   keep_where_nonzero, NULL, OUT_FLOAT, SAVES_NONE, 0) \
  /* binary_cross_entropy_with_logits' elementwise loss of logits a and targets b (core._bce_logits) */ \
  X(BCE_LOGITS, _bce_logits, "BinaryCrossEntropyWithLogitsBackward", OUT_FLOAT, SAVES_AB, 0)

/* Reductions over the middle axis of [outer, k, inner] (backend.h's reduce):
 * X(ID, name). ARGMAX/ARGMIN write int64 positions. */
#define DP_REDUCE_OPS(X) \
  X(SUM,    sum)         \
  X(MEAN,   mean)        \
  X(MAX,    max)         \
  X(MIN,    min)         \
  X(PROD,   prod)        \
  X(ARGMAX, argmax)      \
  X(ARGMIN, argmin)
// clang-format on

/* ---- the enums ---- */
#define DP_OP_ENUM_U(ID, ...) DP_U_##ID,
#define DP_OP_ENUM_B(ID, ...) DP_B_##ID,
#define DP_OP_ENUM_R(ID, ...) DP_R_##ID,
typedef enum { DP_UNARY_OPS(DP_OP_ENUM_U) DP_U_COUNT } dp_unary_op;
typedef enum { DP_BINARY_OPS(DP_OP_ENUM_B) DP_B_COUNT } dp_binary_op;
typedef enum { DP_REDUCE_OPS(DP_OP_ENUM_R) DP_R_COUNT } dp_reduce_op;
#undef DP_OP_ENUM_U
#undef DP_OP_ENUM_B
#undef DP_OP_ENUM_R

typedef enum { DP_RAND_UNIFORM, DP_RAND_NORMAL } dp_rand_kind;

/* Generated code keyed on a column: DP_IF_<value>(code) keeps code for the
 * rows that have that value (the int64 switches cover only the ops with an
 * int64 formula). */
#define DP_IF_INT_TO_FLOAT(...)
#define DP_IF_INT_ERROR(...)
#define DP_IF_INT_KEEP(...) __VA_ARGS__
#define DP_IF_INT_KEEP_IF_WHOLE(...) __VA_ARGS__
#define DP_IF_OUT_PROMOTE(...) __VA_ARGS__
#define DP_IF_OUT_FLOAT(...)
#define DP_IF_OUT_BOOL(...) __VA_ARGS__

/* the column values, with the prefix the generators paste on */
typedef enum { DP_GRAD_NONE, DP_GRAD_X, DP_GRAD_Y } dp_grad_reads;
typedef enum { DP_INT_TO_FLOAT, DP_INT_KEEP, DP_INT_KEEP_IF_WHOLE, DP_INT_ERROR } dp_int_rule;
typedef enum { DP_OUT_PROMOTE, DP_OUT_FLOAT, DP_OUT_BOOL } dp_out_rule;
typedef enum { DP_SAVES_NONE, DP_SAVES_AB, DP_SAVES_ABY } dp_saves;
enum { DP_NO_EPILOGUE = 0, DP_EPILOGUE = 1 };

/* ---- parameters: one struct for every parameterised unary op (the
 * fields of DP_UNARY_PARAM_FIELDS, each in its slot's union), passed by
 * pointer like dp_gemm_args ---- */
#define DP_PARAM_IN_SLOT_0_0(field) double field;
#define DP_PARAM_IN_SLOT_0_1(field)
#define DP_PARAM_IN_SLOT_1_0(field)
#define DP_PARAM_IN_SLOT_1_1(field) double field;
#define DP_PARAM_SLOT_0(field, slot) DP_PARAM_IN_SLOT_0_##slot(field)
#define DP_PARAM_SLOT_1(field, slot) DP_PARAM_IN_SLOT_1_##slot(field)
typedef struct {
  union {
    double slot0_;
    DP_UNARY_PARAM_FIELDS(DP_PARAM_SLOT_0)
  };
  union {
    double slot1_;
    DP_UNARY_PARAM_FIELDS(DP_PARAM_SLOT_1)
  };
} dp_unary_params;
#undef DP_PARAM_SLOT_0
#undef DP_PARAM_SLOT_1
#undef DP_PARAM_IN_SLOT_0_0
#undef DP_PARAM_IN_SLOT_0_1
#undef DP_PARAM_IN_SLOT_1_0
#undef DP_PARAM_IN_SLOT_1_1
DP_STATIC_ASSERT(sizeof(dp_unary_params) == DP_UNARY_PARAM_SLOTS * sizeof(double), "one double a slot");

/* An op and its parameters: what the backends' unary entries take. */
typedef struct {
  dp_unary_op op;
  dp_unary_params p;
} dp_unary_args;

/* The op with the Lua defaults of its parameters (the slots it does not
 * use are 0). */
static inline dp_unary_args dp_unary_args_of(dp_unary_op op) {
  dp_unary_args a;
  a.op = op;
  a.p.slot0_ = 0;
  a.p.slot1_ = 0;
#define DP_PARAM_DEFAULT(ID, field, dflt)                                                                              \
  if (op == DP_U_##ID) a.p.field = dflt;
  DP_UNARY_PARAMS(DP_PARAM_DEFAULT)
#undef DP_PARAM_DEFAULT
  return a;
}

/* One parameter as the Lua binding reads it. */
typedef struct {
  dp_unary_op op;
  const char *name;
  double dflt;
  size_t offset; /* in dp_unary_params */
} dp_param_info;

// clang-format off
static const dp_param_info dp_unary_param_list[] = {
#define DP_PARAM_INFO(ID, field, dflt) {DP_U_##ID, #field, dflt, offsetof(dp_unary_params, field)},
    DP_UNARY_PARAMS(DP_PARAM_INFO)
#undef DP_PARAM_INFO
};
// clang-format on
#define DP_UNARY_NPARAMS (sizeof dp_unary_param_list / sizeof dp_unary_param_list[0])

/* ---- the property tables ---- */
typedef struct {
  const char *name; /* Lua function and method: "clamp" */
  const char *node; /* autograd node: "ClampBackward" (NULL: not differentiable) */
  int arity;        /* 1 or 2 inputs */
  /* unary */
  dp_grad_reads grad;
  dp_int_rule ints;
  bool epilogue;
  /* binary */
  dp_out_rule out;
  dp_saves saves;
  bool scalar_f32;
} dp_op_info;

// clang-format off
#define DP_OP_INFO_U(ID, name, node, grad, ints, epi)                                     \
  {#name, node, 1, DP_##grad, DP_##ints, DP_##epi, DP_OUT_PROMOTE, DP_SAVES_NONE, false},
#define DP_OP_INFO_B(ID, name, node, out, saves, sf32)                            \
  {#name, node, 2, DP_GRAD_NONE, DP_INT_KEEP, false, DP_##out, DP_##saves, sf32},
static const dp_op_info dp_unary_ops[] = {DP_UNARY_OPS(DP_OP_INFO_U)};
static const dp_op_info dp_binary_ops[] = {DP_BINARY_OPS(DP_OP_INFO_B)};
#undef DP_OP_INFO_U
#undef DP_OP_INFO_B
#define DP_OP_NAME_R(ID, name) #name,
static const char *const dp_reduce_names[] = {DP_REDUCE_OPS(DP_OP_NAME_R)};
#undef DP_OP_NAME_R
// clang-format on

DP_STATIC_ASSERT(sizeof dp_unary_ops / sizeof dp_unary_ops[0] == DP_U_COUNT, "one unary row per op");
DP_STATIC_ASSERT(sizeof dp_binary_ops / sizeof dp_binary_ops[0] == DP_B_COUNT, "one binary row per op");
DP_STATIC_ASSERT(sizeof dp_reduce_names / sizeof dp_reduce_names[0] == DP_R_COUNT, "one reduction row per op");
/* linear saves only its output for the fused activation's backward */
#define DP_EPILOGUE_READS_Y(ID, name, node, grad, ints, epi)                                                           \
  DP_STATIC_ASSERT(DP_##epi == DP_NO_EPILOGUE || DP_##grad == DP_GRAD_Y,                                               \
                   #name ": a fused epilogue's backward must read the output");
DP_UNARY_OPS(DP_EPILOGUE_READS_Y)
#undef DP_EPILOGUE_READS_Y

static inline const char *dp_unary_name(dp_unary_op op) {
  return (unsigned)op < DP_U_COUNT ? dp_unary_ops[op].name : "unary op";
}
static inline const char *dp_binary_name(dp_binary_op op) {
  return (unsigned)op < DP_B_COUNT ? dp_binary_ops[op].name : "binary op";
}
static inline const char *dp_reduce_name(dp_reduce_op op) {
  return (unsigned)op < DP_R_COUNT ? dp_reduce_names[op] : "reduction";
}

#endif
