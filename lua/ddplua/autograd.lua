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
  if type(a3) == "table" and getmetatable(a3) == nil and a4 == nil and type(next(a3)) == "string" then
    opts = a3 -- the options table in third place (named keys; a list of grad_outputs has integer ones)
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

-- ---- autograd.Function -----------------------------------------------------------------------------------------
-- torch.autograd.Function: an op whose forward and backward are Lua functions.
--
--   local Exp = ddp.autograd.Function:extend("Exp")
--   function Exp.forward(ctx, x) local y = x:exp(); ctx:save_for_backward(y); return y end
--   function Exp.backward(ctx, gy) local y = table.unpack(ctx.saved_tensors); return gy * y end
--   local y = Exp.apply(x)
--
-- forward runs with grad mode off and may take any arguments and return any values; its floating-point tensor
-- results get a graph node (as fresh tensors: a result that is an input comes back as a new tensor sharing its
-- memory) when grad mode is on and some tensor argument requires grad. backward(ctx, grad per tensor result) runs
-- inside backward and returns one gradient per forward argument (nil for none; the ones for arguments that do not
-- require grad are ignored); a result that got no gradient gives zeros (PyTorch's materialize_grads). ctx holds
-- ctx:save_for_backward(...), ctx.saved_tensors and ctx.needs_input_grad (per argument); any other field can
-- carry state. The node's state is dropped after a backward without retain_graph (a second one is an error).
-- Differences from PyTorch: no ctx.mark_dirty / mark_non_differentiable / set_materialize_grads, no double
-- backward (backward runs with grad mode off), and a backward may not call backward or autograd.grad itself.
local core = ddp.core
local Ctx = {}
Ctx.__index = Ctx
function Ctx:save_for_backward(...)
  local t = table.pack(...)
  for i = 1, t.n do
    if t[i] ~= nil and not ddp.is_tensor(t[i]) then
      E.raise(string.format("save_for_backward: argument %d is a %s, expected a tensor or nil", i, type(t[i])))
    end
  end
  self.saved_tensors = t
end

local FUNCS, next_id = {}, 0 -- id -> {cls, ctx, positions}: a node's Lua state while it may run backward
local function sweep()
  for _, id in ipairs(core._function_dead_ids()) do FUNCS[id] = nil end
end

core._set_function_dispatch(function(id, ...)
  local f = FUNCS[id]
  if not f then error("the Function's state is gone (a second backward without retain_graph?)", 0) end
  local grads = table.pack(f.cls.backward(f.ctx, ...))
  local out = {}
  for k, pos in ipairs(f.positions) do out[k] = grads[pos] or false end
  return out
end)

local Function = { __name = "Function" }
M.Function = Function

--- ddp.autograd.Function:extend(name) -> a Function class; define forward and backward on it, call cls.apply(...)
function Function:extend(name)
  if name ~= nil and type(name) ~= "string" then E.raise("Function:extend: the name must be a string") end
  local cls = setmetatable({ __name = name or "Function" }, { __index = self })
  cls.apply = function(...) return M._apply(cls, ...) end
  return cls
end

function M._apply(cls, ...)
  sweep()
  if type(rawget(cls, "forward")) ~= "function" or type(rawget(cls, "backward")) ~= "function" then
    E.raise(string.format("%s.apply: the Function must define forward(ctx, ...) and backward(ctx, ...)", cls.__name))
  end
  local args = table.pack(...)
  local ctx = setmetatable({ saved_tensors = { n = 0 }, needs_input_grad = {} }, Ctx)
  local grad_on, inputs, positions = ddp.is_grad_enabled(), {}, {}
  for i = 1, args.n do
    local needs = grad_on and ddp.is_tensor(args[i]) and args[i].requires_grad
    ctx.needs_input_grad[i] = needs == true
    if needs then inputs[#inputs + 1], positions[#positions + 1] = args[i], i end
  end
  local outs = table.pack(ddp.no_grad(cls.forward, ctx, ...))
  if #inputs == 0 then return table.unpack(outs, 1, outs.n) end
  local results = {}
  for i = 1, outs.n do
    if ddp.is_tensor(outs[i]) and outs[i]:is_floating_point() then
      outs[i] = outs[i]:detach()
      results[#results + 1] = outs[i]
    end
  end
  if #results == 0 then return table.unpack(outs, 1, outs.n) end
  next_id = next_id + 1
  FUNCS[next_id] = { cls = cls, ctx = ctx, positions = positions }
  core._function_node(inputs, results, next_id, cls.__name)
  return table.unpack(outs, 1, outs.n)
end

return M
