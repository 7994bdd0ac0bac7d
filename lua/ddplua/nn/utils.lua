-- nn.utils: gradient clipping, PyTorch's torch.nn.utils.
--
--   nn.utils.clip_grad_norm_(params, max_norm [, norm_type = 2 | {norm_type=, error_if_nonfinite=}])
--       -> the total norm of all gradients together (a 0-dim tensor); each gradient is scaled in place by
--          min(1, max_norm / (total + 1e-6)). One C pass computes the norm over every gradient.
--   nn.utils.clip_grad_value_(params, clip_value): each gradient clamped to [-clip_value, clip_value] in place.
--
--   nn.utils.parameters_to_vector(params), nn.utils.vector_to_parameters(vec, params)
--   nn.utils.rnn.pad_sequence(sequences [, batch_first = false [, padding_value = 0]])
--
-- params: a tensor, a list of tensors (model:parameters()) or a module; parameters without a gradient are
-- skipped. norm_type may be math.huge (the largest |g|).
local ddp = require "ddplua"

local M = {}

-- The distinct parameters of params (a tensor, a list, a module), checked.
local function params_of(who, params)
  if ddp.is_tensor(params) then params = { params } end
  if type(params) ~= "table" then
    error(string.format("%s: expected a tensor, a list of parameters or a module, got %s", who, type(params)), 3)
  end
  local mt = getmetatable(params)
  if mt and mt.__is_module then params = params:parameters() end
  local ps, seen = {}, {}
  for i, p in ipairs(params) do
    if not ddp.is_tensor(p) then
      error(string.format("%s: parameter %d is a %s, expected a tensor", who, i, type(p)), 3)
    end
    if not seen[p] then
      seen[p] = true
      ps[#ps + 1] = p
    end
  end
  return ps
end

-- Their gradients (parameters without one skipped).
local function grads_of(who, params)
  local gs = {}
  for _, p in ipairs(params_of(who, params)) do
    local g = p.grad
    if g ~= nil then gs[#gs + 1] = g end
  end
  return gs
end

function M.clip_grad_norm_(params, max_norm, norm_type)
  local err = false
  if type(norm_type) == "table" then
    for k in pairs(norm_type) do
      if k ~= "norm_type" and k ~= "error_if_nonfinite" then
        error("clip_grad_norm_: unknown option '" .. tostring(k) .. "' (valid options: norm_type, error_if_nonfinite)", 2)
      end
    end
    err = norm_type.error_if_nonfinite == true
    norm_type = norm_type.norm_type
  end
  norm_type = norm_type or 2
  if type(max_norm) ~= "number" then error("clip_grad_norm_: max_norm must be a number, got " .. type(max_norm), 2) end
  if type(norm_type) ~= "number" then error("clip_grad_norm_: norm_type must be a number, got " .. type(norm_type), 2) end
  -- the gradients are read in C: Lua values of them would keep each step's
  -- gradients alive until the collector runs
  local ps = params_of("clip_grad_norm_", params)
  local ok, total = pcall(ddp.core._clip_grad_norm, ps, max_norm, norm_type, err)
  if not ok then error(total, 2) end
  return total
end

function M.clip_grad_value_(params, clip_value)
  if type(clip_value) ~= "number" or clip_value < 0 then
    error("clip_grad_value_: clip_value must be a number >= 0, got " .. tostring(clip_value), 2)
  end
  ddp.no_grad(function()
    for _, g in ipairs(grads_of("clip_grad_value_", params)) do g:copy_(g:clamp(-clip_value, clip_value)) end
  end)
end

--- The vector of every parameter, flattened and concatenated in order (gradients flow to each).
function M.parameters_to_vector(params)
  local flat = {}
  for i, p in ipairs(params_of("parameters_to_vector", params)) do flat[i] = p:reshape(-1) end
  if #flat == 0 then error("parameters_to_vector: no parameters", 2) end
  return ddp.cat(flat)
end

--- Copies the slices of vec into the parameters, in order (vec's length must be their total size).
function M.vector_to_parameters(vec, params)
  if not ddp.is_tensor(vec) or vec:dim() ~= 1 then
    error("vector_to_parameters: expected a 1-D tensor vec, got " .. (ddp.is_tensor(vec) and vec:dim() .. "-D" or
      type(vec)), 2)
  end
  local ps, total = params_of("vector_to_parameters", params), 0
  for _, p in ipairs(ps) do total = total + p:numel() end
  if total ~= vec:numel() then
    error(string.format("vector_to_parameters: vec has %d values, the parameters %d", vec:numel(), total), 2)
  end
  ddp.no_grad(function()
    local at = 1
    for _, p in ipairs(ps) do
      p:copy_(vec:narrow(1, at, p:numel()):view(p:size()))
      at = at + p:numel()
    end
  end)
end

-- ---- nn.utils.rnn ----
M.rnn = {}

--- pad_sequence(sequences [, batch_first = false [, padding_value = 0]]) (or {batch_first=, padding_value=}):
--- tensors [L_i, *] padded with padding_value to the longest and stacked: [max L, B, *], or [B, max L, *].
function M.rnn.pad_sequence(sequences, ...)
  local o = require("ddplua.nn.util").args("pad_sequence", { "batch_first", "padding_value" }, ...)
  if type(sequences) ~= "table" or #sequences == 0 then
    error("pad_sequence: expected a non-empty list of tensors, got " .. type(sequences), 2)
  end
  local longest, rest = 0, nil
  for i, s in ipairs(sequences) do
    if not ddp.is_tensor(s) or s:dim() < 1 then
      error(string.format("pad_sequence: sequence %d must be a tensor of at least 1 dimension, got %s", i,
        ddp.is_tensor(s) and "a 0-D tensor" or type(s)), 2)
    end
    local trail = table.concat(s:size(), ",", 2)
    if rest and trail ~= rest then
      error(string.format("pad_sequence: sequence %d has trailing dims [%s], sequence 1 [%s]", i, trail, rest), 2)
    end
    rest, longest = trail, math.max(longest, s:size(1))
  end
  local F = require "ddplua.nn.functional"
  local padded = {}
  for i, s in ipairs(sequences) do
    local pads = {}
    for _ = 2, s:dim() do pads[#pads + 1], pads[#pads + 2] = 0, 0 end
    pads[#pads + 1], pads[#pads + 2] = 0, longest - s:size(1) -- F.pad lists the last dim first: dim 1 last
    padded[i] = F.pad(s, pads, "constant", o.padding_value or 0)
  end
  return ddp.stack(padded, o.batch_first and 1 or 2)
end

return M
