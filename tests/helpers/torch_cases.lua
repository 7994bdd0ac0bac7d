-- PyTorch comparisons of module and function cases, for the specs of nn's composed families
-- (tests/spec/nn_norm_more_spec.lua, nn_layers_more_spec.lua).
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"

local M = {}

-- float64 and float32 tolerances of the comparisons (atol, rtol)
M.TOL = { float64 = { 1e-12, 1e-10 }, float32 = { 2e-5, 1e-5 } }

-- Runs every case in ddplua and, in one PyTorch body, in PyTorch; compares the output and the gradients of
-- sum(out * G) (G fixed random weights). A case: { label, dtype =, inputs = { { name, tensor (float64), view = fn,
-- grad = true }, ... }, lua = function(I) -> out [, {name = tensor whose .grad is name's gradient}], py = "<Python
-- lines that set out, and P[name] where name's gradient is another tensor's (a module's parameter)>" }. The op sees
-- view(leaf) (a transpose: non-contiguous); PyTorch gets its values as I[name] (with requires_grad where grad).
function M.check_cases(cases, tol_by_dtype)
  local inputs, runs, body = {}, {}, { "import torch.nn as nn, torch.nn.functional as F" }
  for i, c in ipairs(cases) do
    local dt = c.dtype
    local key = string.format("c%02d", i)
    local I, leaves, grads = {}, {}, {}
    body[#body + 1] = "I, P = {}, {}"
    for _, inp in ipairs(c.inputs) do
      local name = inp[1]
      local leaf = inp[2]:to(dt):clone()
      if inp.grad then leaf:requires_grad_(); grads[#grads + 1] = name end
      leaves[name] = leaf
      I[name] = inp.view and inp.view(leaf) or leaf
      inputs[key .. "." .. name] = I[name]:detach():contiguous()
      body[#body + 1] = string.format("I[%q] = T[%q].clone().requires_grad_(%s)", name, key .. "." .. name,
        inp.grad and "True" or "False")
    end
    local out, P = c.lua(I)
    assert(out:dtype() == dt, c[1] .. ": a " .. dt .. " input gave a " .. out:dtype() .. " output")
    local G = R.randn(out:size(), 100 + i):to(dt)
    inputs[key .. ".G"] = G
    if #grads > 0 then (out * G):sum():backward() end
    body[#body + 1] = c.py
    body[#body + 1] = string.format("OUT[%q] = out", key .. ".out")
    if #grads > 0 then
      body[#body + 1] = string.format("(out * T[%q]).sum().backward()", key .. ".G")
      for _, name in ipairs(grads) do
        body[#body + 1] = string.format("OUT[%q] = P.get(%q, I[%q]).grad", key .. ".grad_" .. name, name, name)
      end
    end
    runs[#runs + 1] = { key = key, case = c, out = out, leaves = leaves, P = P or {} }
  end
  local ref = TR.run(table.concat(body, "\n") .. "\n", inputs)
  for _, r in ipairs(runs) do
    local dt = r.case.dtype
    local tol, what = (tol_by_dtype or M.TOL)[dt], r.case[1] .. " (" .. dt .. ")"
    R.assert_close(r.out:detach(), R.from(ref[r.key .. ".out"]), tol[1], tol[2], what .. ": output")
    for _, inp in ipairs(r.case.inputs) do
      if inp.grad then
        local name = inp[1]
        local g = (r.P[name] or r.leaves[name]).grad
        assert(g ~= nil, what .. ": no gradient for " .. name)
        if inp.view and not r.P[name] then g = inp.view(g) end
        R.assert_close(g, R.from(ref[r.key .. ".grad_" .. name]), tol[1], tol[2], what .. ": gradient of " .. name)
      end
    end
  end
  return #runs
end

-- the cases of make(dtype) for float32 and float64
function M.both_dtypes(make)
  local all = {}
  for _, dt in ipairs({ "float32", "float64" }) do
    for _, c in ipairs(make(dt)) do
      c.dtype = dt
      all[#all + 1] = c
    end
  end
  return all
end

return M
