-- ddplua: data-parallel training in Lua over a C runtime.
-- `local ddp = require "ddplua"`; see README.md for the tour.
--
-- The table is the documented API only (README.md; tests/spec/exports_spec.lua
-- holds the list and checks it). Everything else the C core provides (the
-- optimizer and batch-norm pieces, the DDP reducer, file and process helpers,
-- YAML/JSON) stays under ddp.core, which is the same table as
-- require "ddplua.core" and makes no promise to users.
local core = require "ddplua.core"
local E = require "ddplua.errors"

local M = {}

-- Documented functions of the C core, exported under the same name.
local CORE_EXPORTS = {
  -- creation
  "tensor", "zeros", "ones", "full", "empty", "arange", "rand", "randn", "randperm", "cat", "stack", "is_tensor",
  -- the ops' functional forms (also tensor methods)
  "abs", "add", "sub", "mul", "div", "neg", "pow", "exp", "log", "sqrt", "rsqrt", "square", "reciprocal", "sign",
  "clamp", "maximum", "minimum", "relu", "gelu", "leaky_relu", "elu", "silu", "softplus", "tanh", "sigmoid", "softmax", "log_softmax", "sum", "mean", "max",
  "min", "argmax", "argmin", "eq", "ne", "lt", "le", "gt", "ge", "matmul", "mm", "index_select", "linear", "conv2d",
  "conv_transpose2d", "max_pool2d", "avg_pool2d", "batch_norm", "layer_norm", "dropout", "embedding", "cross_entropy", "mse_loss",
  "nll_loss",
  -- the model ops (src/ops/model_ops.h)
  "sin", "cos", "erf", "log1p", "expm1", "where", "masked_fill", "tril", "triu", "gather", "scatter", "scatter_add",
  "topk", "split", "chunk", "cumsum", "flip", "tile", "norm", "var", "std", "randint", "multinomial", "bernoulli",
  "floor", "ceil", "round", "trunc",
  "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log2", "log10", "exp2",
  -- autograd mode, random numbers
  "set_grad_enabled", "is_grad_enabled", "manual_seed", "initial_seed", "get_rng_state", "set_rng_state",
  -- safetensors
  "save", "load",
  -- runtime: threads, GEMM, memory, devices, time
  "set_num_threads", "get_num_threads", "set_flush_denormal", "blas_info", "gemm_impl", "set_gemm_impl",
  "memory_stats", "empty_cache", "cuda_is_available", "cuda_device_count", "cuda_device_name", "cuda_memory_stats", "cuda_empty_cache",
  "synchronize", "clock",
  -- values that outlive a `ddplua --watch` rerun (the same process, a fresh Lua environment)
  "keep",
}

for _, k in ipairs(CORE_EXPORTS) do
  M[k] = core[k] or E.raise("ddplua: the C core has no '" .. k .. "' (lua/ddplua/init.lua exports it)")
end
M.core = core
M.Tensor = core.Tensor
M._VERSION = "ddplua 0.1"

-- Grad mode ---------------------------------------------------------------

local no_grad_mt = {
  __close = function(self) core.set_grad_enabled(self.prev) end,
  __name = "no_grad",
}

--- ddp.no_grad(fn, ...) runs fn with gradient recording off and returns its
--- results; ddp.no_grad() returns a to-be-closed guard:
---   do local _ <close> = ddp.no_grad() ... end
function M.no_grad(fn, ...)
  if fn == nil then
    return setmetatable({ prev = core.set_grad_enabled(false) }, no_grad_mt)
  end
  if type(fn) ~= "function" then
    E.raise("no_grad: expected a function or no argument, got " .. type(fn))
  end
  local prev = core.set_grad_enabled(false)
  local res = table.pack(pcall(fn, ...))
  core.set_grad_enabled(prev)
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

function M.enable_grad(fn, ...)
  local prev = core.set_grad_enabled(true)
  local res = table.pack(pcall(fn, ...))
  core.set_grad_enabled(prev)
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

--- Seeds every generator the framework owns (the Philox generator behind
--- rand/randn/dropout/randperm, and Lua's math.random). The seed doc's
--- `seed + rank` is the caller's choice.
function M.seed_everything(seed)
  if math.type(seed) ~= "integer" then
    E.raise("seed_everything: expected an integer seed, got " .. tostring(seed))
  end
  core.manual_seed(seed)
  math.randomseed(seed)
end

-- Run helpers and checkpoints (config.lua, checkpoint.lua, metrics.lua,
-- progress.lua); loaded on first call. ddp.save / ddp.load (safetensors)
-- come from the C module.
function M.config(defaults, opts) return require("ddplua.config").resolve(defaults, opts) end
function M.save_checkpoint(path, what) return require("ddplua.checkpoint").save(path, what) end
function M.load_checkpoint(path, opts) return require("ddplua.checkpoint").load(path, opts) end
function M.progress(total, opts) return require("ddplua.progress").new(total, opts) end
function M.save_state(path, state, opts) return require("ddplua.state").save(path, state, opts) end
function M.load_state(path, opts) return require("ddplua.state").load(path, opts) end
-- A loop that survives restarts (ddplua/resume.lua): periodic checkpoints, and resuming from the last one.
function M.checkpoint_every(opts) return require("ddplua.resume").every(opts) end
function M.resume(every) return require("ddplua.resume").resume(every) end
--- ddp.einsum(equation, a, b, ...): lua/ddplua/einsum.lua
function M.einsum(eq, ...) return require("ddplua.einsum")(eq, ...) end
-- Devices ------------------------------------------------------------------

--- ddp.device(): "cuda:<LOCAL_RANK>" when a GPU is available, else "cpu".
--- LOCAL_RANK (set by the launcher, 0 without one) wraps around the visible
--- GPUs, so several ranks on a one-GPU machine share it (the cpu process
--- group supports that; nccl needs a GPU per rank).
function M.device()
  if not core.cuda_is_available() then return "cpu" end
  local n = core.cuda_device_count()
  local local_rank = math.tointeger(tonumber(os.getenv("LOCAL_RANK") or "0")) or 0
  return "cuda:" .. (local_rank % n)
end

--- PyTorch's torch.set_float32_matmul_precision: "highest" keeps float32
--- GEMMs in float32, "high" and "medium" let CUDA use TF32 tensor cores.
local matmul_precision = "highest"
function M.set_float32_matmul_precision(p)
  if p ~= "highest" and p ~= "high" and p ~= "medium" then
    E.raise("set_float32_matmul_precision: expected \"highest\", \"high\" or \"medium\", got " .. tostring(p))
  end
  matmul_precision = p
  if core.cuda_is_available() then core.cuda_set_option("tf32", p ~= "highest") end
end
function M.get_float32_matmul_precision() return matmul_precision end

--- ddp.autocast("bfloat16" | "float16" | false [, fn, ...]): mixed precision
--- for matmul/linear/conv2d on CUDA (see ddplua.amp).
function M.autocast(...) return M.amp.autocast(...) end

-- Run helpers (lua/ddplua/distributed.lua): ddp.is_main(), ddp.print(...)
-- on rank 0 only.
function M.is_main() return require("ddplua.distributed").is_main() end
function M.print(...) return require("ddplua.distributed").print(...) end

-- Submodules load on first use so `require "ddplua"` stays fast. ddp.dist
-- is ddp.distributed (as `import torch.distributed as dist`). An unknown
-- key is nil, as in any table; pairs(ddp) lists the whole API, loading the
-- submodules.
local lazy = {
  nn = "ddplua.nn",
  optim = "ddplua.optim",
  data = "ddplua.data",
  distributed = "ddplua.distributed",
  dist = "ddplua.distributed",
  amp = "ddplua.amp",
  metrics = "ddplua.metrics",
  autograd = "ddplua.autograd",
}
setmetatable(M, {
  __index = function(t, k)
    local mod = lazy[k]
    if mod then
      local v = require(mod)
      rawset(t, k, v)
      return v
    end
    return nil
  end,
  __pairs = function(t)
    for k in pairs(lazy) do
      local _ = t[k]
    end
    return next, t, nil
  end,
})

package.loaded["ddplua"] = M
require "ddplua.tensor"
require "ddplua.tensor_logic"
require "ddplua.tensor_more"
require "ddplua.tensor_linalg"
require "ddplua.tensor_math"
require "ddplua.tensor_shape"
require "ddplua.tensor_reduce_more"
require "ddplua.tensor_order"
require "ddplua.tensor_forms"
require "ddplua.tensor_stats"
require "ddplua.tensor_index"
require "ddplua.tensor_hooks"
return M
