-- nn.init: PyTorch's in-place initialisers, drawing from ddplua's Philox generator (ddp.manual_seed makes them
-- reproducible on every device). Each returns its tensor; settings positionally in PyTorch's order or by name in an
-- options table last (nn.init.kaiming_normal_(w, {mode = "fan_out", nonlinearity = "relu"})):
--
--   uniform_(t, a = 0, b = 1)  normal_(t, mean = 0, std = 1)  constant_(t, v)  zeros_(t)  ones_(t)  eye_(t)
--   trunc_normal_(t, mean = 0, std = 1, a = -2, b = 2)        N(mean, std^2) redrawn until inside [a, b]
--   xavier_uniform_(t, gain = 1)  xavier_normal_(t, gain = 1)  bound / std from fan_in + fan_out
--   kaiming_uniform_(t, a = 0, mode = "fan_in", nonlinearity = "leaky_relu")  kaiming_normal_(same)
--   orthogonal_(t, gain = 1)    the rows (or columns, whichever are fewer) of t viewed as [size(1), rest] orthonormal
--   calculate_gain(nonlinearity, param)  fan_in(t)  fan_out(t)
--
-- The fans are PyTorch's: a Linear (out x in) or Conv (out x in x k...) weight has fan_in = in * receptive field and
-- fan_out = out * receptive field. The random streams are ddplua's, not PyTorch's: the same distributions, not the
-- same numbers. orthogonal_ orthonormalises a normal draw by Gram-Schmidt (twice, for float rounding) where PyTorch
-- takes a QR decomposition's Q: an orthogonal matrix either way, not the same one.
local ddp = require "ddplua"
local E = require "ddplua.errors"

local M = {}

-- settings after t: positional in `names`' order, or an options table last (nn/util.args; loaded late: nn/util
-- requires this module's users)
local function args(who, names, ...) return require("ddplua.nn.util").args("nn.init." .. who, names, ...) end

local function check_tensor(who, t)
  if not ddp.is_tensor(t) then E.raise(string.format("nn.init.%s: expected a tensor, got %s", who, type(t))) end
  if not t:is_floating_point() then
    E.raise(string.format("nn.init.%s: expected a floating-point tensor, got %s", who, t:dtype()))
  end
end

local function fill_from(t, src)
  ddp.no_grad(function() t:copy_(src) end)
  return t
end

local function opts_of(t) return { dtype = t:dtype(), device = t:device() } end

--- U(a, b)
function M.uniform_(t, ...)
  local o = args("uniform_", { "a", "b" }, ...)
  check_tensor("uniform_", t)
  -- the tensor method draws into t itself (no temporary: on a VM each page of a new block costs a fault)
  ddp.no_grad(function() t:uniform_(o.a or 0, o.b or 1) end)
  return t
end

--- N(mean, std^2)
function M.normal_(t, ...)
  local o = args("normal_", { "mean", "std" }, ...)
  check_tensor("normal_", t)
  ddp.no_grad(function() t:normal_(o.mean or 0, o.std or 1) end)
  return t
end

function M.constant_(t, v)
  if not ddp.is_tensor(t) then E.raise("nn.init.constant_: expected a tensor, got " .. type(t)) end
  ddp.no_grad(function() t:fill_(v) end)
  return t
end
function M.zeros_(t) return M.constant_(t, 0) end
function M.ones_(t) return M.constant_(t, 1) end

--- The identity matrix (t 2-D, any dtype).
function M.eye_(t)
  if not ddp.is_tensor(t) then E.raise("nn.init.eye_: expected a tensor, got " .. type(t)) end
  if t:dim() ~= 2 then E.raise("nn.init.eye_: only 2-D tensors are supported, got " .. t:dim() .. "-D") end
  local r, c = t:size(1), t:size(2)
  local k = math.min(r, c)
  local id = ddp.zeros(r, c, opts_of(t))
  if k > 0 then
    local pos = ddp.arange(1, k + 1, { dtype = "int64", device = t:device() }):view(k, 1)
    id = ddp.cat({ ddp.zeros(k, c, opts_of(t)):scatter(2, pos, 1), ddp.zeros(r - k, c, opts_of(t)) }, 1)
  end
  return fill_from(t, id)
end

--- N(mean, std^2) truncated to [a, b]: entries outside are drawn again until none is.
function M.trunc_normal_(t, ...)
  local o = args("trunc_normal_", { "mean", "std", "a", "b" }, ...)
  check_tensor("trunc_normal_", t)
  local mean, std, a, b = o.mean or 0, o.std or 1, o.a or -2, o.b or 2
  if not (a < b) then E.raise(string.format("nn.init.trunc_normal_: expected a < b, got a = %g, b = %g", a, b)) end
  if not (std > 0) then E.raise("nn.init.trunc_normal_: std must be positive, got " .. tostring(std)) end
  local lo, hi = (a - mean) / std, (b - mean) / std
  if hi < -6 or lo > 6 then -- almost nothing of the normal lies there: redrawing would not end
    E.raise(string.format("nn.init.trunc_normal_: [a, b] = [%g, %g] is more than 6 std from the mean %g", a, b, mean))
  end
  local x = ddp.randn(t:size(), opts_of(t))
  for _ = 1, 10000 do
    local out = x:lt(lo):logical_or(x:gt(hi))
    if out:any():item() == 0 then break end -- (a uint8 0 / 1: Lua's 0 is true)
    x = ddp.where(out, ddp.randn(t:size(), opts_of(t)), x)
  end
  return fill_from(t, (x * std + mean):clamp(a, b)) -- (the clamp: x * std + mean may round past a bound)
end

--- The receptive field's size times the input (fan_in) or output (fan_out) channels, PyTorch's
--- _calculate_fan_in_and_fan_out.
local function fans(who, t)
  if not ddp.is_tensor(t) then E.raise(string.format("nn.init.%s: expected a tensor, got %s", who, type(t))) end
  if t:dim() < 2 then
    E.raise(string.format("nn.init.%s: fan in and fan out can not be computed for a tensor with fewer than 2 " ..
      "dimensions, got %d", who, t:dim()))
  end
  local receptive = t:dim() > 2 and t:numel() // (t:size(1) * t:size(2)) or 1
  return t:size(2) * receptive, t:size(1) * receptive
end

--- fan_in of a Linear (out x in) or Conv (out x in x kh x kw) weight.
function M.fan_in(t) return (fans("fan_in", t)) end
function M.fan_out(t) return select(2, fans("fan_out", t)) end

--- PyTorch's calculate_gain(nonlinearity, param).
function M.calculate_gain(nonlinearity, param)
  local linear = { linear = true, conv1d = true, conv2d = true, conv3d = true, conv_transpose1d = true,
    conv_transpose2d = true, conv_transpose3d = true, sigmoid = true }
  if linear[nonlinearity] then return 1 end
  if nonlinearity == "tanh" then return 5 / 3 end
  if nonlinearity == "relu" then return math.sqrt(2) end
  if nonlinearity == "selu" then return 3 / 4 end
  if nonlinearity == "leaky_relu" then
    local slope = param == nil and 0.01 or param
    if type(slope) ~= "number" then
      E.raise("nn.init.calculate_gain: negative_slope " .. tostring(slope) .. " is not a valid number")
    end
    return math.sqrt(2 / (1 + slope * slope))
  end
  E.raise("nn.init.calculate_gain: unsupported nonlinearity " .. tostring(nonlinearity))
end

--- Xavier (Glorot) uniform: U(-a, a), a = gain * sqrt(6 / (fan_in + fan_out)).
function M.xavier_uniform_(t, ...)
  local gain = args("xavier_uniform_", { "gain" }, ...).gain or 1
  local fi, fo = fans("xavier_uniform_", t)
  local a = gain * math.sqrt(6 / (fi + fo))
  return M.uniform_(t, -a, a)
end

--- Xavier (Glorot) normal: N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out)).
function M.xavier_normal_(t, ...)
  local gain = args("xavier_normal_", { "gain" }, ...).gain or 1
  local fi, fo = fans("xavier_normal_", t)
  return M.normal_(t, 0, gain * math.sqrt(2 / (fi + fo)))
end

-- Kaiming's std = gain / sqrt(fan) from the settings (a, mode, nonlinearity)
local function kaiming_std(who, t, o)
  local mode = o.mode or "fan_in"
  if mode ~= "fan_in" and mode ~= "fan_out" then
    E.raise(string.format("nn.init.%s: mode must be \"fan_in\" or \"fan_out\", got %s", who, tostring(mode)))
  end
  local fi, fo = fans(who, t)
  local fan = mode == "fan_in" and fi or fo
  if fan == 0 then E.raise(string.format("nn.init.%s: initializing a zero-element tensor is a no-op here and in " ..
    "PyTorch (fan %d)", who, fan)) end
  return M.calculate_gain(o.nonlinearity or "leaky_relu", o.a or 0) / math.sqrt(fan)
end

local KAIMING = { "a", "mode", "nonlinearity" }

--- Kaiming (He) uniform: U(-b, b), b = sqrt(3) * gain / sqrt(fan). a = sqrt(5) with leaky_relu, the Linear/Conv
--- default, gives b = 1 / sqrt(fan_in).
function M.kaiming_uniform_(t, ...)
  local bound = math.sqrt(3) * kaiming_std("kaiming_uniform_", t, args("kaiming_uniform_", KAIMING, ...))
  return M.uniform_(t, -bound, bound)
end

--- Kaiming (He) normal: N(0, std^2), std = gain / sqrt(fan).
function M.kaiming_normal_(t, ...)
  return M.normal_(t, 0, kaiming_std("kaiming_normal_", t, args("kaiming_normal_", KAIMING, ...)))
end

--- An orthogonal matrix (t viewed as [size(1), rest]) times gain.
function M.orthogonal_(t, ...)
  local gain = args("orthogonal_", { "gain" }, ...).gain or 1
  check_tensor("orthogonal_", t)
  if t:dim() < 2 then E.raise("nn.init.orthogonal_: only tensors with 2 or more dimensions are supported") end
  local rows = t:size(1)
  local cols = t:numel() // math.max(rows, 1)
  if rows == 0 or cols == 0 then return t end
  local a = ddp.randn(rows, cols, { dtype = "float64" })
  if rows < cols then a = a:t():contiguous() end -- orthonormal columns of the taller shape
  local q = {}
  for j = 1, a:size(2) do
    local v = a:select(2, j)
    for _ = 1, 2 do -- twice: one pass leaves float rounding's loss of orthogonality
      for i = 1, j - 1 do v = v - q[i] * q[i]:dot(v) end
    end
    q[j] = v / v:norm()
  end
  local m = ddp.stack(q, 2)
  if rows < cols then m = m:t() end
  return fill_from(t, (m * gain):reshape(t:size()):to(t:dtype()))
end

return M
