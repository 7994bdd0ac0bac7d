-- t:register_hook(fn) as PyTorch's: fn(grad) runs when backward computes t's gradient and may return a tensor of
-- the same shape and dtype to go on with instead (nil keeps it). On a non-leaf tensor it runs before the gradient
-- flows on through the op that made t; on a leaf, before the gradient goes into t.grad (and before DDP's hooks see
-- it). Hooks run in registration order, with grad mode off, and may not run backward themselves; an error in one
-- stops the backward with the hook's message. Returns a handle whose :remove() takes the hook away.
-- (The engine side is dp_backward_watch, src/autograd/engine.c; the hooks live in a weak-keyed table of the
-- registry, core._grad_hooks(), that src/lua/l_tensor.c reads at each backward.)
--
-- Difference from PyTorch: ddp.autograd.grad does not run hooks.
local ddp = require "ddplua"
local core = ddp.core
local E = require "ddplua.errors"
local T = core.Tensor

local HOOKS = core._grad_hooks()

local handle_mt = { __index = {}, __name = "RemovableHandle" }
function handle_mt.__index.remove(h)
  local list = h.tensor and HOOKS[h.tensor]
  if list then
    for i, fn in ipairs(list) do
      if rawequal(fn, h.fn) then
        table.remove(list, i)
        break
      end
    end
    if #list == 0 then HOOKS[h.tensor] = nil end
  end
  h.tensor, h.fn = nil, nil
end

function T.register_hook(t, fn)
  if not ddp.is_tensor(t) then E.raise("register_hook: expected a tensor, got " .. type(t)) end
  local mt = getmetatable(fn)
  if type(fn) ~= "function" and not (mt and mt.__call) then
    E.raise("register_hook: expected a function, got " .. type(fn))
  end
  if not t.requires_grad then
    E.raise("register_hook: cannot register a hook on a tensor that does not require gradient")
  end
  local hook = fn
  if type(fn) ~= "function" then hook = function(g) return fn(g) end end
  local list = HOOKS[t] or {}
  list[#list + 1] = hook
  HOOKS[t] = list
  return setmetatable({ tensor = t, fn = hook }, handle_mt)
end
