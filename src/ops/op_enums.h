/* The op codes backends implement (unary, binary, reduction, random
 * kinds). A header of its own, free of the tensor struct, so that the
 * shared per-element math (scalar_math.h) and the CUDA kernels can switch
 * on them. */
#ifndef DP_OP_ENUMS_H
#define DP_OP_ENUMS_H

typedef enum {
  DP_U_NEG,
  DP_U_EXP,
  DP_U_LOG,
  DP_U_RELU,
  DP_U_GELU, /* tanh approximation off: exact erf GELU (PyTorch default) */
  DP_U_TANH,
  DP_U_SIGMOID,
  DP_U_SQRT,
  DP_U_RSQRT,
  DP_U_ABS,
  DP_U_SQUARE,
  DP_U_RECIP,
  DP_U_SIGN,
  DP_U_COUNT
} dp_unary_op;

typedef enum {
  DP_B_ADD,
  DP_B_SUB,
  DP_B_MUL,
  DP_B_DIV,
  DP_B_MAX,
  DP_B_MIN,
  DP_B_POW,
  /* comparisons produce uint8 0/1 */
  DP_B_EQ,
  DP_B_NE,
  DP_B_LT,
  DP_B_LE,
  DP_B_GT,
  DP_B_GE,
  DP_B_COUNT
} dp_binary_op;

typedef enum { DP_R_SUM, DP_R_MEAN, DP_R_MAX, DP_R_MIN, DP_R_PROD, DP_R_ARGMAX, DP_R_ARGMIN } dp_reduce_op;

typedef enum { DP_RAND_UNIFORM, DP_RAND_NORMAL } dp_rand_kind;

#endif
