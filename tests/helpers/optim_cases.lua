-- The optimizer specs' harness: an optimizer run over a fixed gradient sequence, PyTorch's options written as
-- Python, and the comparison of ddplua's run with PyTorch's for every case in float64 and float32.
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"

local M = {}

--- p (p0 in dt, a leaf) after `steps` updates of optim[cls] with the gradients gs[1..steps]; p, the optimizer
function M.run(cls, opts, p0, gs, dt, steps)
  local p = p0:to(dt):clone():requires_grad_()
  local opt = ddp.optim[cls](opts.groups and { { params = { p } } } or { p }, opts)
  for s = 1, steps do
    p.grad = gs[s]:to(dt):clone()
    opt:step()
  end
  return p, opt
end

--- the options as Python keyword arguments (tables as tuples, booleans as True / False)
function M.py_opts(opts)
  local parts = {}
  for k, v in pairs(opts) do
    local s = type(v) == "table" and string.format("(%s, %s)", v[1], v[2]) or
      type(v) == "boolean" and (v and "True" or "False") or tostring(v)
    parts[#parts + 1] = string.format("%s=%s", k, s)
  end
  return table.concat(parts, ", ")
end

--- every case {cls, opts [, python class]} run here and in PyTorch (prelude: Python defining extra classes) from
--- p0 and the gradients gs, compared in float64 (atol64, rtol 1e-12) and float32 (1e-6, 1e-5)
function M.check_against_torch(cases, p0, gs, steps, atol64, prelude)
  local inputs = { p0 = p0 }
  for s = 1, steps do inputs["g" .. s] = gs[s] end
  local body = { prelude or "", "for c, (cls, kw) in enumerate([" }
  for _, case in ipairs(cases) do
    body[#body + 1] = string.format("    (%s, dict(%s)),", case[3] or "torch.optim." .. case[1], M.py_opts(case[2]))
  end
  body[#body + 1] = string.format([[]):
    for dt in (torch.float64, torch.float32):
        p = T["p0"].to(dt).clone().requires_grad_()
        opt = cls([p], **kw)
        for s in range(1, %d):
            p.grad = T["g%%d" %% s].to(dt).clone()
            opt.step()
        OUT["p%%d_%%s" %% (c + 1, str(dt)[-2:])] = p]], steps + 1)
  local ref = TR.run(table.concat(body, "\n"), inputs)
  for c, case in ipairs(cases) do
    for _, dt in ipairs({ "float64", "float32" }) do
      local p = M.run(case[1], case[2], p0, gs, dt, steps)
      local tol = dt == "float64" and { atol64, 1e-12 } or { 1e-6, 1e-5 }
      R.assert_close(p, R.from(ref[string.format("p%d_%s", c, dt:sub(-2))]), tol[1], tol[2],
        string.format("%s case %d %s", case[1], c, dt))
    end
  end
end

local function same_values(a, b, what)
  local gc = require "helpers.gradcheck"
  local x, y = gc.flat_values(a), gc.flat_values(b)
  assert(#x == #y, what .. ": sizes differ")
  for i = 1, #x do assert(x[i] == y[i], string.format("%s: element %d is %s, want %s", what, i, x[i], y[i])) end
end

--- case {cls, opts}: 3 steps with a second parameter that never gets a gradient (left as it was, no state), the
--- state dict's entries for the first (exactly want_names, sorted), and a fresh optimizer loaded from it that
--- continues to `steps` bitwise as one run of them
function M.check_state_resume(case, p0, gs, steps, want_names)
  local optim = ddp.optim
  local full = M.run(case[1], case[2], p0, gs, "float64", steps)
  local p, q = p0:clone():requires_grad_(), p0:clone():requires_grad_() -- q never gets a gradient
  local opt = optim[case[1]]({ p, q }, case[2])
  for s = 1, 3 do
    p.grad = gs[s]:clone()
    opt:step()
  end
  same_values(q, p0, case[1] .. ": the parameter without a gradient")
  local sd = opt:state_dict()
  assert(sd.state[1].step == 3, case[1] .. ": step is " .. tostring(sd.state[1].step) .. ", want 3")
  assert(sd.state[2] == nil, case[1] .. ": state for the parameter without a gradient")
  local names = {}
  for k in pairs(sd.state[1]) do names[#names + 1] = k end
  table.sort(names)
  local want = { table.unpack(want_names) }
  table.sort(want)
  assert(table.concat(names, ",") == table.concat(want, ","),
    string.format("%s: state %s, want %s", case[1], table.concat(names, ","), table.concat(want, ",")))
  local p2 = p:detach():clone():requires_grad_()
  local opt2 = optim[case[1]]({ p2, q:detach():clone():requires_grad_() }, case[2])
  opt2:load_state_dict(sd)
  for s = 4, steps do
    p2.grad = gs[s]:clone()
    opt2:step()
  end
  same_values(p2, full, case[1] .. ": resumed from the state dict")
end

return M
