-- ddp.autograd: torch.autograd's functional entry point.
--
--   ddp.autograd.grad(outputs, inputs [, grad_outputs] [, {grad_outputs =, retain_graph =, create_graph =,
--                     allow_unused =}]) -> a list of the gradients of the outputs with respect to the inputs
--
-- outputs and inputs: a tensor or a list of them; inputs may be leaves or tensors computed from them (each must
-- require grad). grad_outputs: one gradient per output (a tensor, or a list with nil for a one-element output,
-- whose gradient is 1). The gradients are returned, not added to any tensor's .grad, and no gradient hook (DDP's)
-- runs, as in PyTorch. The graph is freed unless retain_graph. An input the outputs do not depend on is an error,
-- or nil in the list with allow_unused = true.
--
-- Differences from PyTorch: create_graph = true (gradients of gradients: gradient penalties, Hessian-vector
-- products) is refused, as ddplua's backward functions are C kernels that are not themselves recorded;
-- is_grads_batched is not taken.
local ddp = require "ddplua"
local E = require "ddplua.errors"

local M = {}
local core_grad = ddp.core._autograd_grad
local OPTIONS = { grad_outputs = true, retain_graph = true, create_graph = true, allow_unused = true,
  only_inputs = true }

-- a tensor or a list of tensors -> a list; what names the argument in errors
local function tensors(v, what, holes)
  if ddp.is_tensor(v) then return { v }, 1 end
  if type(v) ~= "table" or getmetatable(v) ~= nil then
    E.raise(string.format("autograd.grad: %s must be a tensor or a list of tensors, got %s", what, type(v)))
  end
  local n = 0
  for k in pairs(v) do
    if math.type(k) ~= "integer" or k < 1 then
      E.raise(string.format("autograd.grad: %s must be a list (keys 1 .. n), got the key %s", what, tostring(k)))
    end
    n = math.max(n, k)
  end
  for i = 1, n do
    if v[i] == nil and not holes then
      E.raise(string.format("autograd.grad: %s[%d] is nil, expected a tensor", what, i))
    elseif v[i] ~= nil and not ddp.is_tensor(v[i]) then
      E.raise(string.format("autograd.grad: %s[%d] is a %s, expected a tensor", what, i, type(v[i])))
    end
  end
  return v, n
end

function M.grad(outputs, inputs, a3, a4)
  local opts, grad_outputs = {}, nil
  if type(a3) == "table" and getmetatable(a3) == nil and not ddp.is_tensor(a3[1]) and a4 == nil and next(a3) ~= nil
      and a3[1] == nil then
    opts = a3 -- the options table in third place
  else
    grad_outputs = a3
    if a4 ~= nil then
      if type(a4) ~= "table" or getmetatable(a4) ~= nil then
        E.raise("autograd.grad: the options must be a table {retain_graph =, allow_unused =, ...}, got " .. type(a4))
      end
      opts = a4
    end
  end
  for k in pairs(opts) do
    if not OPTIONS[k] then
      E.raise(string.format("autograd.grad: unknown option '%s' (expected grad_outputs, retain_graph, create_graph, " ..
        "allow_unused)", tostring(k)))
    end
  end
  if opts.grad_outputs ~= nil then
    if grad_outputs ~= nil then E.raise("autograd.grad: grad_outputs given twice (in place 3 and as an option)") end
    grad_outputs = opts.grad_outputs
  end
  if opts.create_graph then
    E.raise("autograd.grad: create_graph = true (gradients of gradients) is not supported: ddplua's backward " ..
      "functions are C kernels that autograd does not record")
  end
  local outs, n_out = tensors(outputs, "outputs")
  local ins = tensors(inputs, "inputs")
  local gouts = nil
  if grad_outputs ~= nil then
    local n_g
    gouts, n_g = tensors(grad_outputs, "grad_outputs", true)
    if n_g > n_out then
      E.raise(string.format("autograd.grad: %d grad_outputs for %d outputs (expected one each)", n_g, n_out))
    end
  end
  local ok, res = pcall(core_grad, outs, ins, gouts, opts.retain_graph == true)
  if not ok then E.raise((tostring(res):gsub("^[^:\n]*%.lua:%d+: ", ""))) end -- at the user's line
  for k = 1, #ins do
    if res[k] == false then
      if not opts.allow_unused then
        E.raise(string.format("autograd.grad: input %d is not used in the graph of the outputs (allow_unused = " ..
          "true gives nil for it)", k))
      end
      res[k] = nil
    end
  end
  return res
end

return M
