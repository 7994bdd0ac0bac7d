-- The Lua surface is deliberate: `require "ddplua"` gives the names listed
-- here and no other, in each namespace (ddp, ddp.nn, ddp.nn.F, ddp.optim,
-- ddp.data, ddp.distributed, the tensor methods), and every listed name is
-- documented.
--
-- The rule for "documented": the name appears, in the form a user writes it,
-- inside code (a fenced block or a `span`) of README.md or of a docs/ page
-- that README.md links to directly ([...](docs/page.md)). The forms:
-- ddp.NAME, nn.NAME, F.NAME (nn.F.NAME), optim.NAME, data.NAME, dist.NAME,
-- and for a tensor method x:NAME( after a name or a closing bracket. The
-- reverse holds too: every ddp./nn./F./optim./data./dist. name those code
-- parts mention must exist, so the pages cannot promise what is gone.
--
-- To add a public name: export it (lua/ddplua/init.lua lists the C core's),
-- list it below, document it in README.md. Internals go to ddp.core.
local ddp = require "ddplua"
local U = require "helpers.io_util"

local EXPORTS = {
  ddp = {
    form = "ddp.", names = {
      -- namespaces
      "nn", "optim", "data", "distributed", "dist", "amp", "metrics", "autograd", "core", "Tensor", "_VERSION",
      -- tensors
      "tensor", "zeros", "ones", "full", "empty", "arange", "rand", "randn", "randperm", "zeros_like", "ones_like",
      "full_like", "rand_like", "randn_like", "cat", "stack", "is_tensor", "Generator",
      -- the ops' functional forms
      "abs", "add", "sub", "mul", "div", "neg", "pow", "exp", "log", "sqrt", "rsqrt", "square", "reciprocal", "sign",
      "clamp", "maximum", "minimum", "relu", "gelu", "leaky_relu", "elu", "silu", "softplus", "tanh", "sigmoid",
      "softmax", "log_softmax", "sum", "mean",
      "max", "min", "argmax", "argmin", "eq", "ne", "lt", "le", "gt", "ge", "matmul", "mm", "index_select", "linear",
      "conv2d", "conv_transpose2d", "max_pool2d", "avg_pool2d", "batch_norm", "layer_norm", "dropout", "embedding",
      "cross_entropy", "mse_loss", "nll_loss",
      -- the model ops
      "sin", "cos", "erf", "log1p", "expm1", "where", "masked_fill", "tril", "triu", "gather", "scatter", "scatter_add",
      "topk", "split", "chunk", "cumsum", "flip", "tile", "norm", "var", "std", "randint", "multinomial", "bernoulli",
      "einsum", "floor", "ceil", "round", "trunc", "isnan", "isinf", "isfinite", "any", "all", "logical_not", "logical_and", "logical_or", "logsumexp",
      "bmm", "count_nonzero", "isclose", "allclose", "equal", "sort", "argsort", "clamp_min", "clamp_max",
      "prod", "cumprod", "amax", "amin", "kthvalue", "median", "nonzero", "masked_select", "roll", "movedim", "unbind",
      "dot", "mv", "outer", "addmm", "baddbmm", "trace", "diag",
      "acos", "acosh", "addcdiv", "addcmul", "aminmax", "argwhere", "asin", "asinh", "atan", "atan2", "atanh",
      "atleast_1d", "atleast_2d", "atleast_3d", "block_diag", "broadcast_tensors", "broadcast_to", "bucketize",
      "cartesian_prod", "cdist", "clip", "column_stack", "concat", "cosh", "cross", "cummax", "cummin", "deg2rad",
      "diag_embed", "diagonal", "diff", "dstack", "empty_like", "exp2", "eye", "floor_divide", "fmod", "frac",
      "heaviside", "histc", "hstack", "hypot", "index_add", "index_copy", "index_fill", "lerp", "linspace", "log10",
      "log2", "logaddexp", "logaddexp2", "logcumsumexp", "logit", "logspace", "masked_scatter", "meshgrid", "mode",
      "nan_to_num", "nanmean", "nansum", "numel", "rad2deg", "randint_like", "ravel", "remainder",
      "repeat_interleave", "rsub", "searchsorted", "sgn", "sinh", "std_mean", "swapaxes", "swapdims", "take",
      "take_along_dim", "tan", "tril_indices", "triu_indices", "true_divide", "unflatten", "unique",
      "unique_consecutive", "var_mean", "vstack", "xlogy", "quantile", "nanquantile", "nanmedian", "msort", "bincount",
      "histogram", "flatten", "reshape", "transpose", "permute", "squeeze", "unsqueeze", "narrow", "select", "t",
      "clone", "detach", "is_floating_point", "tensor_split", "hsplit", "vsplit", "dsplit", "rot90", "kron", "inner",
      "tensordot", "vdot", "addmv", "addr", "logical_xor", "isneginf", "isposinf", "signbit", "copysign", "fmax",
      "fmin", "erfinv", "sinc", "cov", "corrcoef", "trapezoid", "trapz", "cumulative_trapezoid", "isin", "diagflat",
      "vander", "combinations", "lgamma", "digamma", "float_power", "normal",
      -- autograd, random numbers
      "no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled", "manual_seed", "initial_seed",
      "seed_everything", "get_rng_state", "set_rng_state",
      -- files and runs
      "save", "load", "save_checkpoint", "load_checkpoint", "config", "progress", "save_state", "load_state",
      "checkpoint_every", "resume", "keep",
      -- processes and devices
      "is_main", "print", "device", "synchronize", "cuda_is_available", "cuda_device_count", "cuda_device_name",
      "cuda_memory_stats", "cuda_empty_cache", "autocast", "set_float32_matmul_precision",
      "get_float32_matmul_precision",
      -- the CPU runtime
      "set_num_threads", "get_num_threads", "set_flush_denormal", "blas_info", "gemm_impl", "set_gemm_impl", "memory_stats", "empty_cache",
      "clock",
    },
  },
  nn = {
    form = "nn.", names = {
      "Module", "Sequential", "Linear", "Conv2d", "ConvTranspose2d", "BCELoss", "BCEWithLogitsLoss", "L1Loss",
      "SmoothL1Loss", "HuberLoss", "KLDivLoss", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "RNNCell",
      "LSTMCell", "GRUCell", "Conv1d", "ConvTranspose1d", "MaxPool1d", "AvgPool1d", "Upsample", "UpsamplingNearest2d",
      "UpsamplingBilinear2d", "PixelShuffle", "PixelUnshuffle", "ZeroPad2d", "ConstantPad1d", "ConstantPad2d",
      "ReflectionPad1d", "ReflectionPad2d", "ReplicationPad1d", "ReplicationPad2d", "MaxPool2d", "AvgPool2d", "BatchNorm1d", "BatchNorm2d",
      "SyncBatchNorm", "ReLU", "GELU", "LeakyReLU", "ELU", "SiLU", "Softplus", "Tanh", "Sigmoid", "Dropout", "Dropout2d",
      "Flatten", "Embedding", "LayerNorm", "CrossEntropyLoss", "NLLLoss", "MSELoss", "F", "init", "ModuleList",
      "ModuleDict", "Identity", "AdaptiveAvgPool2d", "RNN", "LSTM", "GRU", "MultiheadAttention",
      "TransformerEncoderLayer", "TransformerEncoder", "utils", "Softmax", "LogSoftmax", "Softmin", "GLU", "PReLU",
      "Unflatten", "CosineSimilarity", "PairwiseDistance", "Parameter", "AdaptiveMaxPool2d", "AdaptiveMaxPool1d",
      "AdaptiveAvgPool1d", "TransformerDecoderLayer", "TransformerDecoder", "Transformer",
      "EmbeddingBag", "MarginRankingLoss", "HingeEmbeddingLoss", "SoftMarginLoss", "CosineEmbeddingLoss",
      "TripletMarginLoss", "MultiLabelSoftMarginLoss", "PoissonNLLLoss", "GaussianNLLLoss", "MultiMarginLoss",
      "Hardtanh", "ReLU6", "Hardsigmoid", "Hardswish", "Mish", "SELU", "CELU", "LogSigmoid", "Softsign", "Tanhshrink",
      "Softshrink", "Hardshrink", "Threshold", "Unfold", "Fold", "Bilinear", "LocalResponseNorm", "ChannelShuffle",
      "Conv3d", "ConvTranspose3d", "MaxPool3d", "AvgPool3d", "AdaptiveAvgPool3d", "AdaptiveMaxPool3d", "BatchNorm3d",
      "InstanceNorm3d", "Dropout3d", "ConstantPad3d", "ReflectionPad3d", "ReplicationPad3d", "CTCLoss",
    },
  },
  F = {
    form = "F.", names = {
      "relu", "gelu", "leaky_relu", "elu", "silu", "softplus", "tanh", "sigmoid", "softmax", "log_softmax",
      "flatten", "linear", "conv2d", "conv_transpose2d", "max_pool2d", "binary_cross_entropy",
      "binary_cross_entropy_with_logits", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div", "group_norm",
      "instance_norm", "conv1d", "conv_transpose1d", "max_pool1d", "avg_pool1d", "interpolate", "pixel_shuffle",
      "pixel_unshuffle", "pad", "unfold", "fold", "bilinear", "local_response_norm", "channel_shuffle",
      "affine_grid", "grid_sample", "conv3d", "conv_transpose3d", "max_pool3d", "avg_pool3d", "adaptive_avg_pool3d",
      "adaptive_max_pool3d", "dropout3d", "ctc_loss",
      "avg_pool2d", "batch_norm", "layer_norm", "dropout", "dropout2d", "embedding", "cross_entropy", "mse_loss", "nll_loss",
      "scaled_dot_product_attention", "self_attention_qkv", "self_attention_qkv_composed", "adaptive_avg_pool2d",
      "softmin", "glu", "prelu", "cosine_similarity", "pairwise_distance", "normalize", "one_hot", "adaptive_max_pool2d",
      "adaptive_max_pool1d", "adaptive_avg_pool1d", "embedding_bag", "margin_ranking_loss", "hinge_embedding_loss",
      "soft_margin_loss", "cosine_embedding_loss", "triplet_margin_loss", "multilabel_soft_margin_loss",
      "poisson_nll_loss", "gaussian_nll_loss", "multi_margin_loss", "hardtanh", "relu6", "hardsigmoid", "hardswish",
      "mish", "selu", "celu", "logsigmoid", "softsign", "tanhshrink", "softshrink", "hardshrink", "threshold",
    },
  },
  optim = { form = "optim.", names = { "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Optimizer", "lr_scheduler",
    "Adamax", "NAdam", "RAdam" } },
  data = {
    form = "data.", names = {
      "TensorDataset", "Subset", "random_split", "FashionMNIST", "SequentialSampler", "RandomSampler",
      "DistributedSampler", "DataLoader", "CSVImageDataset", "transforms", "TokenFile", "ByteTokenizer",
      "CharTokenizer", "get_worker_info",
    },
  },
  dist = {
    form = "dist.", names = {
      "init_process_group", "destroy_process_group", "is_initialized", "get_rank", "get_world_size",
      "get_local_rank", "get_local_world_size", "get_backend", "all_reduce", "broadcast", "reduce", "all_gather",
      "reduce_scatter", "all_gather_into_tensor", "reduce_scatter_tensor", "barrier", "send", "recv", "new_group", "group", "ReduceOp", "spawn", "find_free_port",
      "nccl_available", "alloc_shared", "gather_for_metrics", "is_main", "print", "device",
      "DistributedDataParallel", "DDP",
    },
  },
  tensor = {
    form = ":", names = {
      "size", "stride", "dim", "numel", "nelement", "dtype", "device", "is_contiguous", "element_size", "data_ptr",
      "is_floating_point", "item", "totable", "tolist", "to", "float", "double", "long", "byte", "cpu", "cuda",
      "type_as", "clone", "contiguous", "detach", "view", "reshape", "view_as", "expand", "expand_as", "transpose",
      "t", "permute", "narrow", "select", "flatten", "unsqueeze", "squeeze", "fill_", "zero_", "copy_", "add_",
      "sub_", "mul_", "div_", "requires_grad_", "backward", "retain_grad", "register_hook", "free", "abs", "add", "sub", "mul", "div", "neg", "pow",
      "exp", "log", "sqrt", "rsqrt", "square", "reciprocal", "sign", "clamp", "maximum", "minimum", "relu", "gelu",
      "leaky_relu", "elu", "silu", "softplus", "tanh", "sigmoid", "softmax", "log_softmax", "sum", "mean", "max", "min", "argmax", "argmin", "eq", "ne", "lt",
      "hardtanh", "hardsigmoid", "hardswish", "mish", "selu", "celu", "logsigmoid", "softsign", "tanhshrink",
      "softshrink", "hardshrink", "threshold", "gelu_tanh",
      "acos", "acosh", "addcdiv", "addcmul", "aminmax", "argwhere", "asin", "asinh", "atan", "atan2", "atanh",
      "bfloat16", "bool", "broadcast_to", "clip", "cosh", "cross", "cummax", "cummin", "deg2rad", "diag_embed",
      "diagonal", "diff", "exp2", "floor_divide", "fmod", "frac", "half", "heaviside", "histc", "hypot",
      "index_add", "index_add_", "index_copy", "index_copy_", "index_fill", "index_fill_", "lerp", "log10", "log2",
      "logaddexp", "logaddexp2", "logcumsumexp", "logit", "masked_scatter", "mode", "nan_to_num", "nanmean",
      "nansum", "new_empty", "new_tensor", "rad2deg", "ravel", "remainder", "repeat_interleave", "rsub", "sgn",
      "sinh", "swapaxes", "swapdims", "take", "take_along_dim", "tan", "true_divide", "unflatten", "unique",
      "unique_consecutive", "xlogy", "quantile", "nanquantile", "nanmedian", "msort", "bincount", "histogram",
      "clamp_", "clamp_min_", "clamp_max_", "masked_fill_", "relu_", "sigmoid_", "tanh_", "exp_", "log_", "log1p_",
      "expm1_", "sqrt_", "rsqrt_", "neg_", "abs_", "sign_", "pow_", "floor_", "ceil_", "round_", "trunc_", "frac_",
      "reciprocal_", "square_", "sin_", "cos_", "erf_", "nan_to_num_", "lerp_", "addcmul_", "addcdiv_", "tril_",
      "triu_", "uniform_", "normal_", "bernoulli_", "exponential_", "fill_diagonal_", "unfold", "tensor_split",
      "hsplit", "vsplit", "dsplit", "rot90", "fliplr", "flipud", "kron", "inner", "vdot", "addmv", "addr",
      "logical_xor", "isneginf", "isposinf", "signbit", "copysign", "fmax", "fmin", "erfinv", "sinc", "reshape_as",
      "ndimension", "isin", "diagflat", "lgamma", "digamma", "float_power",
      "le", "gt", "ge", "matmul", "mm", "index_select",
      "sin", "cos", "erf", "log1p", "expm1", "masked_fill", "tril", "triu", "gather", "scatter", "scatter_add",
      "scatter_", "scatter_add_", "topk", "split", "chunk", "cumsum", "flip", "repeat_", "tile", "norm", "var", "std",
      "multinomial", "bernoulli", "floor", "ceil", "round", "trunc", "isnan", "isinf", "isfinite", "any", "all", "logical_not", "logical_and",
      "logical_or", "logsumexp", "bmm", "count_nonzero", "isclose", "allclose", "equal", "sort", "argsort",
      "clamp_min", "clamp_max", "new_zeros", "new_ones", "new_full",
      "prod", "cumprod", "amax", "amin", "kthvalue", "median", "nonzero", "masked_select", "roll", "movedim", "unbind",
      "dot", "mv", "outer", "addmm", "baddbmm", "trace", "diag",
    },
  },
}


-- Every namespace, with its submodules loaded (pairs(ddp) loads them).
local function tables()
  for _ in pairs(ddp) do end
  for _ in pairs(ddp.distributed) do end
  return { ddp = ddp, nn = ddp.nn, F = ddp.nn.F, optim = ddp.optim, data = ddp.data, dist = ddp.distributed,
           tensor = ddp.Tensor }
end

local function sorted_keys(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = tostring(k) end
  table.sort(out)
  return out
end

local function set_of(list)
  local s = {}
  for _, v in ipairs(list) do s[v] = true end
  return s
end

-- The code parts of README.md and of the docs/ pages it links to.
local function documented_code()
  local readme = U.read("README.md")
  local texts, pages = { readme }, { "README.md" }
  for page in readme:gmatch("%]%((docs/[%w_%-]+%.md)%)") do
    if not set_of(pages)[page] then
      assert.is_true(U.exists(page), "README.md links to " .. page .. ", which does not exist")
      texts[#texts + 1], pages[#pages + 1] = U.read(page), page
    end
  end
  local code = {}
  for _, text in ipairs(texts) do
    local prose = text:gsub("\n```[^\n]*\n(.-)\n```", function(block)
      code[#code + 1] = block
      return "\n"
    end)
    for span in prose:gmatch("`([^`]+)`") do code[#code + 1] = span end
  end
  return table.concat(code, "\n"), table.concat(pages, ", ")
end

local function plain(s) return (s:gsub("%p", "%%%0")) end

local function is_documented(code, ns, name)
  if ns == "tensor" then return code:find("[%w_%]%)]:" .. plain(name) .. "%(") ~= nil end
  return code:find("%f[%w_]" .. plain(EXPORTS[ns].form .. name) .. "%f[^%w_]") ~= nil
end

describe("the Lua surface", function()
  it("exports exactly the listed names in each namespace", function()
    for ns, t in pairs(tables()) do
      local listed = set_of(EXPORTS[ns].names)
      local extra, missing = {}, {}
      for _, k in ipairs(sorted_keys(t)) do
        if not listed[k] then extra[#extra + 1] = k end
      end
      for _, k in ipairs(EXPORTS[ns].names) do
        if rawget(t, k) == nil then missing[#missing + 1] = k end
      end
      assert.are.same({}, extra, ns .. " has names that tests/spec/exports_spec.lua does not list (internals " ..
        "belong under ddp.core): " .. table.concat(extra, ", "))
      assert.are.same({}, missing, ns .. " lacks listed names: " .. table.concat(missing, ", "))
    end
  end)

  it("documents every exported name in README.md (or a docs/ page it links)", function()
    local code, where = documented_code()
    for ns, t in pairs(tables()) do
      local undocumented = {}
      for _, k in ipairs(EXPORTS[ns].names) do
        if not is_documented(code, ns, k) then undocumented[#undocumented + 1] = EXPORTS[ns].form .. k end
      end
      assert.are.same({}, undocumented, "not documented in the code of " .. where .. ": " ..
        table.concat(undocumented, ", "))
    end
  end)

  it("documents no name that does not exist", function()
    local code, where = documented_code()
    local all = tables()
    local stale = {}
    for ns, t in pairs(all) do
      if ns ~= "tensor" then
        for name in code:gmatch("%f[%w_]" .. plain(EXPORTS[ns].form) .. "([%a_][%w_]*)") do
          if t[name] == nil then stale[#stale + 1] = EXPORTS[ns].form .. name end
        end
      end
    end
    assert.are.same({}, stale, where .. " mention names that do not exist: " .. table.concat(stale, ", "))
  end)

  it("keeps internals under ddp.core, and ddp a plain table for unknown keys", function()
    assert.are.equal(require "ddplua.core", ddp.core)
    assert.are.equal(ddp.core.Tensor, ddp.Tensor)
    for _, internal in ipairs { "_adam_step", "_sgd_step", "_zero_grads", "_set_data", "ddp_reducer", "gc_pace", "_gc_counts",
      "getpid", "mkdir", "batch_norm_stats", "sync_batch_norm", "yaml_load", "json_encode", "image",
      "keep_grad_buf" } do
      assert.is_not_nil(ddp.core[internal], "ddp.core." .. internal)
      assert.is_nil(ddp[internal], "ddp." .. internal .. " should not be exported")
    end
    assert.is_nil(ddp.no_such_name)
    assert.is_nil(ddp[42])
    assert.is_nil(ddp.Tensor._keep_grad_buf)
  end)

  it("ddp.dist is ddp.distributed, so dist.init_process_group works as in PyTorch", function()
    assert.are.equal(ddp.distributed, ddp.dist)
    assert.are.equal("function", type(ddp.dist.init_process_group)) -- the C table's was nil
    assert.are.equal(ddp.distributed.DistributedDataParallel, ddp.dist.DDP)
  end)

  it("gives tensors the documented properties", function()
    local t = ddp.ones(2, 3)
    assert.are.same({ 2, 3 }, t.shape) -- was an error: t.shape passed "shape" to size()
    assert.are.equal(2, t.ndim)
    assert.are.same(t:totable(), t.data:totable())
    assert.is_false(t.requires_grad)
    assert.is_true(t.is_leaf)
    assert.is_nil(t.grad)
    local y = (t:requires_grad_() * 2):sum()
    assert.are.equal("SumBackward", y.grad_fn)
    y:backward()
    assert.are.same({ { 2, 2, 2 }, { 2, 2, 2 } }, t.grad:totable())
    local code = documented_code()
    for _, prop in ipairs { "shape", "ndim", "data", "requires_grad", "is_leaf", "grad", "grad_fn" } do
      assert.is_not_nil(code:find("[%w_]%." .. prop .. "%f[^%w_]"), "tensor property ." .. prop .. " undocumented")
    end
  end)
end)
