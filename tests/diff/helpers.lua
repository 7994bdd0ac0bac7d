-- The Lua helpers the suite's expressions may call (tests/diff/ops.lua;
-- torch_ref.py defines the same names for the PyTorch side), kept as
-- source so that a reproducer (run.lua) carries the ones it uses and runs
-- on its own. Each takes its inputs and returns the op's outputs.
local H = {}

H.source = {
  -- batch_norm returning y and the running statistics it updated in place
  bn = [[
local function bn(x, rm, rv, w, b, A)
  local y = ddp.batch_norm(x, rm, rv, w, b, A.training, A.momentum, A.eps)
  return y, rm, rv
end]],
  -- t[i] = v (an in-place write autograd records), returning t
  setitem = [[
local function setitem(t, i, v)
  t[i] = v
  return t
end]],
  -- n optimizer steps on a copy of p with the gradients g[1..n] (rows of g), returning the parameter
  optim_steps = [[
local function optim_steps(p, g, A)
  local q = p:detach():clone():requires_grad_()
  local opt = ddp.optim[A.opt]({ q }, A.hp)
  for i = 1, g:size(1) do
    q.grad = g[i]:clone()
    opt:step()
  end
  return q:detach()
end]],
}

--- The helpers' names used by the Lua expression src (in a fixed order).
function H.used(src)
  local names = {}
  for name in pairs(H.source) do
    if src:find("%f[%w_]" .. name .. "%(") then names[#names + 1] = name end
  end
  table.sort(names)
  return names
end

--- An environment for the expressions: the helpers, ddp, and the globals.
function H.env(ddp)
  local env = setmetatable({ ddp = ddp }, { __index = _G })
  for name, src in pairs(H.source) do
    env[name] = assert(load("local ddp = ...\n" .. src .. "\nreturn " .. name, "=" .. name, "t", env))(ddp)
  end
  return env
end

return H
