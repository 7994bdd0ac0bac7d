-- Argument checks shared by the nn modules: errors name the module and
-- what was expected.
local ddp = require "ddplua"
local E = require "ddplua.errors"

local M = {}

--- Checks that opts is nil or a table whose keys are all in `valid` (tensor_checks.lua's, shared with the tensor
--- functions).
M.check_opts = require("ddplua.tensor_checks").check_opts

--- An instance of one of the library's own module classes (nn/init.lua marks them rawly: a user's class or subclass
--- is not marked), its forward not replaced, and so are its children all the way down (a library container hands its
--- input to its children): its forward keeps no reference to its input or output and returns a new tensor or its
--- input. The library's forwards free their intermediates between such modules (release, below).
function M.is_library(m)
  local cls = getmetatable(m)
  if type(cls) ~= "table" or rawget(cls, "_library_module") ~= true or rawget(m, "forward") ~= nil then return false end
  local names = rawget(m, "_module_names")
  for k = 1, names and #names or 0 do
    local child = rawget(m, names[k])
    if child ~= nil and not M.is_library(child) then return false end
  end
  return true
end

--- When `free`: t:free() unless t is not a tensor or is one of the tensors given (a module returned its input as it
--- came). An intermediate nothing else refers to goes at once, as PyTorch's reference count would free it; the
--- collector would hold it, and with it (autograd holding its own reference while backward needs it) its storage
--- until a full collection.
function M.release(free, t, ...)
  if not free or not ddp.is_tensor(t) then return end
  for i = 1, select("#", ...) do
    if rawequal(t, (select(i, ...))) then return end
  end
  t:free()
end

local function is_options(v) return type(v) == "table" and rawget(v, 1) == nil and getmetatable(v) == nil end

--- PyTorch's way of passing a module's settings: after the required
--- arguments, the settings positionally in `names`' order (nil skips one),
--- then optionally one options table of the rest by name (keys checked
--- against `names`), as Python's keyword arguments follow its positional
--- ones: nn.ConvTranspose2d(100, 64, 4, 1, 0, {bias = false}). Returns the
--- options table. A table with a [1] entry is a positional value (a {h, w}
--- pair), not an options table.
function M.args(who, names, ...)
  local n = select("#", ...)
  local last = n > 0 and select(n, ...) or nil
  -- (an empty table after positional settings is a positional value: SequentialLR's milestones {})
  local named = is_options(last) and (n == 1 or next(last) ~= nil) and last or nil
  local npos = named and n - 1 or n
  if npos > #names then
    E.raise(string.format("%s: too many arguments (%d after the required ones; the settings are %s)", who, npos,
      table.concat(names, ", ")))
  end
  local opts = {}
  for i = 1, npos do
    local v = select(i, ...)
    if is_options(v) and next(v) ~= nil then
      E.raise(string.format("%s: an options table must come last, after the positional settings (got it as " ..
        "argument %d, before argument %d)", who, i, i + 1))
    end
    opts[names[i]] = v
  end
  if named then
    M.check_opts(who, named, names)
    for i = 1, npos do
      if named[names[i]] ~= nil then
        E.raise(string.format("%s: %s is given twice (argument %d and in the options table)", who, names[i], i))
      end
    end
    for k, v in pairs(named) do opts[k] = v end
  end
  return opts
end

--- An error for a PyTorch setting this module accepts but cannot honour
--- yet, when it is given a value other than PyTorch's default.
function M.unsupported(who, name, value, default, why)
  if value ~= nil and value ~= default then
    E.raise(string.format("%s: %s=%s is not supported yet (%s); leave it at %s", who, name, tostring(value), why,
      tostring(default)))
  end
end

local PADDING_MODES = { zeros = true, reflect = true, replicate = true, circular = true }

--- A convolution's padding_mode: "zeros" (nil), "reflect", "replicate" or "circular".
function M.check_padding_mode(who, mode)
  if mode == nil then return "zeros" end
  if not PADDING_MODES[mode] then
    E.raise(string.format("%s: padding_mode must be 'zeros', 'reflect', 'replicate' or 'circular', got %s", who,
      type(mode) == "string" and ("'" .. mode .. "'") or tostring(mode)))
  end
  return mode
end

--- x padded by pads ({left, right [, top, bottom]}, F.pad's order) in a convolution's padding_mode, the convolution
--- then running unpadded (PyTorch's order of the two); an unbatched input ([C, L] or [C, H, W]) gets a batch dim
--- for the pad (circular pads batched inputs only).
function M.conv_mode_pad(x, pads, mode, batched)
  local pad = require("ddplua.nn.functional").pad
  if batched then return pad(x, pads, mode) end
  return pad(x:unsqueeze(1), pads, mode):squeeze(1)
end

--- A positive (or, with allow_zero, non-negative) integer.
function M.check_int(who, what, v, allow_zero)
  if math.type(v) ~= "integer" or v < 0 or (v == 0 and not allow_zero) then
    E.raise(string.format("%s: %s must be a %s integer, got %s", who, what, allow_zero and "non-negative" or "positive",
      tostring(v)))
  end
  return v
end

--- An integer or a pair of integers -> h, w.
function M.check_pair(who, what, v, allow_zero)
  if type(v) == "table" then
    if #v ~= 2 then
      E.raise(string.format("%s: %s must be an integer or a pair {h, w}, got %d values", who, what, #v))
    end
    return M.check_int(who, what, v[1], allow_zero), M.check_int(who, what, v[2], allow_zero)
  end
  M.check_int(who, what, v, allow_zero)
  return v, v
end

--- The form the functional ops take: one number when both sides agree.
function M.pair_arg(h, w) if h == w then return h end return { h, w } end

--- A setting's value for a message: {h, w} pairs as "(h, w)".
function M.value_str(v)
  if type(v) == "table" then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = tostring(x) end
    return "(" .. table.concat(parts, ", ") .. ")"
  end
  return tostring(v)
end

function M.shape_str(t) return "[" .. table.concat(t:size(), ", ") .. "]" end

--- A tensor option table for creating parameters.
function M.tensor_opts(opts) return { dtype = opts.dtype, device = opts.device } end

--- A new parameter: values from make() built without recording a graph.
function M.parameter(make)
  local t = ddp.no_grad(make)
  return t:requires_grad_()
end

--- A transposed convolution's output_padding for a wanted output size (PyTorch's _output_padding): m has
--- stride, padding, dilation, kernel_size and output_padding as lists of k (1, 2 or 3) sizes; output_size is nil (m's
--- own output_padding), the k sizes, or them after the leading dims (x:dim() sizes), or for k = 1 a plain integer.
--- Each side must lie between the smallest size and that plus stride - 1. Returns the list of k paddings.
function M.transposed_output_padding(m, x, output_size, k)
  if output_size == nil then return m.output_padding end
  local sizes = output_size
  if k == 1 and math.type(output_size) == "integer" then sizes = { output_size } end
  local form = ({ "{L}", "{h, w}", "{d, h, w}" })[k]
  if type(sizes) ~= "table" or (#sizes ~= k and #sizes ~= x:dim()) then
    E.raise(string.format("%s: output_size must be %s or %d sizes, got %s", tostring(m), form, x:dim(),
      M.value_str(output_size)))
  end
  local op = {}
  for d = 1, k do
    local want = sizes[#sizes - k + d]
    local small = (x:size(x:dim() - k + d) - 1) * m.stride[d] - 2 * m.padding[d] +
        m.dilation[d] * (m.kernel_size[d] - 1) + 1
    if math.type(want) ~= "integer" or want < small or want >= small + m.stride[d] then
      E.raise(string.format("%s: requested an output size of %s, but valid sizes range from %d to %d (for an input "
        .. "of %s)", tostring(m), M.value_str(output_size), small, small + m.stride[d] - 1, M.shape_str(x)))
    end
    op[d] = want - small
  end
  return op
end

--- The 1-d and 3-d convolution modules' settings and parameters (nn/conv1d.lua, nn/conv3d.lua): bias must be a
--- boolean or nil; in and out channels divisible by groups; weight of `shape` (kaiming_uniform, a = sqrt(5)) and
--- a bias of out_channels (U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in the product of shape's dims after the first)
--- unless bias is false, PyTorch's _ConvNd init.
function M.check_conv_bias(who, bias)
  if bias ~= nil and type(bias) ~= "boolean" then
    E.raise(who .. ": bias must be true or false, got " .. tostring(bias))
  end
end
function M.check_conv_groups(who, in_channels, out_channels, groups)
  if in_channels % groups ~= 0 or out_channels % groups ~= 0 then
    E.raise(string.format("%s: in_channels %d and out_channels %d must both be divisible by groups %d", who,
      in_channels, out_channels, groups))
  end
end
function M.conv_parameters(m, shape, out_channels, bias, topts)
  local init = require "ddplua.nn.initializers"
  m:register_parameter("weight", M.parameter(function()
    return init.kaiming_uniform_(ddp.empty(shape, topts), math.sqrt(5))
  end))
  if bias == false then
    m:register_parameter("bias", nil)
    return
  end
  local fan_in = 1
  for i = 2, #shape do fan_in = fan_in * shape[i] end
  local bound = 1 / math.sqrt(fan_in)
  m:register_parameter("bias", M.parameter(function()
    return init.uniform_(ddp.empty(out_channels, topts), -bound, bound)
  end))
end

--- A normalisation's affine parameters: weight (ones) and bias (zeros) of n, or both registered as nil.
function M.norm_affine(m, n, on, topts)
  m:register_parameter("weight", on and M.parameter(function() return ddp.ones(n, topts) end) or nil)
  m:register_parameter("bias", on and M.parameter(function() return ddp.zeros(n, topts) end) or nil)
end

--- A normalisation's running statistics: running_mean (zeros), running_var (ones) of n and num_batches_tracked
--- (an int64 0), or the three registered as nil; m:reset_running_stats() resets them (norm_reset).
function M.norm_running_stats(m, n, on, topts)
  m:register_buffer("running_mean", on and ddp.zeros(n, topts) or nil)
  m:register_buffer("running_var", on and ddp.ones(n, topts) or nil)
  m:register_buffer("num_batches_tracked", on and ddp.tensor(0, { dtype = "int64", device = topts.device }) or nil)
end

function M.norm_reset(m)
  if m.track_running_stats then
    ddp.no_grad(function()
      m.running_mean:zero_()
      m.running_var:fill_(1)
      m.num_batches_tracked:zero_()
    end)
  end
end

--- Python's repr of a number: integers as they are, floats shortest round-trip with ".0" when integral.
function M.py_num(v)
  if math.type(v) == "integer" then return tostring(v) end
  if v ~= v then return "nan" end
  if v == math.huge then return "inf" elseif v == -math.huge then return "-inf" end
  local s
  for p = 1, 17 do
    s = string.format("%." .. p .. "g", v)
    if tonumber(s) == v then break end
  end
  local mant, ex = s:match("^(-?[%d.]+)e([-+]%d+)$")
  if mant then
    local e = tonumber(ex)
    if e >= -4 and e < 16 then -- Python writes these positionally
      local digits = #mant:gsub("[-.]", "") - 1
      s = string.format("%." .. math.max(0, digits - e) .. "f", v)
    else
      return mant .. "e" .. (ex:sub(1, 1) == "-" and "-" or "+") .. string.format("%02d", math.abs(e))
    end
  end
  if not s:find("[.e]") then s = s .. ".0" end
  return s
end

--- Python's repr of a tuple of numbers: (1, 2), (5,).
function M.py_tuple(list)
  local parts = {}
  for i, v in ipairs(list) do parts[i] = M.py_num(v) end
  if #parts == 1 then return "(" .. parts[1] .. ",)" end
  return "(" .. table.concat(parts, ", ") .. ")"
end

--- A Lua list as [1, 2, 3] for messages.
function M.list_str(list)
  local parts = {}
  for i, v in ipairs(list) do parts[i] = tostring(v) end
  return "[" .. table.concat(parts, ", ") .. "]"
end

--- Raises "<who>: expected a tensor input, got <type>" unless x is a tensor.
function M.check_tensor(who, x)
  if not ddp.is_tensor(x) then E.raise(string.format("%s: expected a tensor input, got %s", who, type(x))) end
end

--- A plain Lua list (a table without a metatable).
function M.is_list(v) return type(v) == "table" and getmetatable(v) == nil end

--- Before a layer builds per-position index lists or loops for an output of x's leading dims and `sizes` (the
--- spatial ones): an error naming who when that output could not exist (sizes not finite integers, more elements
--- than a tensor holds, more bytes than can be allocated), found by allocating a large one once; so a hostile size
--- (math.maxinteger, a scale of 1e300) fails at once instead of looping over the positions.
function M.check_output_alloc(who, x, sizes)
  local shape, numel = {}, 1.0
  for d = 1, x:dim() - #sizes do shape[#shape + 1] = x:size(d) end
  for i, v in ipairs(sizes) do
    local n = math.tointeger(v)
    if not n then
      E.raise(string.format("%s: output size %s in spatial dim %d is not an integer (too large?)", who, tostring(v), i))
    end
    shape[#shape + 1] = n
  end
  for _, n in ipairs(shape) do numel = numel * n end
  -- an output of up to 2^26 elements (256 MB of float32) needs no trial: every call of a training step pays for it
  if numel <= 2 ^ 26 then return end
  local ok, t = pcall(ddp.empty, shape, { dtype = x:dtype(), device = x:device() })
  if not ok then
    E.raise(string.format("%s: the output %s cannot be made: %s", who, M.list_str(shape), (tostring(t):gsub("^.-: ", ""))))
  end
  t:free()
end

return M
