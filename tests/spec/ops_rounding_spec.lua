-- floor, ceil, round (ties to even) and trunc: rows of the op table, so every dtype path and kernel set runs the
-- shared formulas; against PyTorch on halves, negative values, values past 2^23, the specials and integers, and
-- the zero gradient.
local ddp = require "ddplua"
local core = ddp.core
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"

local OPS = { "floor", "ceil", "round", "trunc" }
local VALUES = { -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 1.7, -1.7, 0.49999997, -0.49999997, 8388609, -8388607.5,
  1e30, -1e-30, 0 / 0, math.huge, -math.huge, -0.0, 0.0 }

describe("rounding ops", function()
  for _, isa in ipairs(R.cpu_kernel_sets()) do
    it(isa .. ": match PyTorch for float32, float64, bfloat16 and int64, strided too", function()
      if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
      local prev = core.set_cpu_kernels(isa)
      local x32 = ddp.tensor(VALUES, { dtype = "float32" })
      local long = ddp.randn(40) * 100 -- several vector blocks
      local inputs = { x = x32, x64 = ddp.tensor(VALUES, { dtype = "float64" }), xb = x32:to("bfloat16"):float(),
        i = ddp.tensor({ -3, 0, 7, 9007199254740993 }), long = long }
      local got = {}
      for _, op in ipairs(OPS) do
        got[op] = x32[op](x32)
        got[op .. "64"] = inputs.x64[op](inputs.x64)
        got[op .. "b"] = x32:to("bfloat16")[op](x32:to("bfloat16")):float()
        got[op .. "i"] = inputs.i[op](inputs.i)
        got[op .. "l"] = long:view(8, 5):t()[op](long:view(8, 5):t()) -- transposed
      end
      local ref = TR.run([[
for op in ("floor", "ceil", "round", "trunc"):
    f = getattr(torch, op)
    OUT[op], OUT[op + "64"] = f(T["x"]), f(T["x64"])
    OUT[op + "b"] = f(T["x"].bfloat16()).float()
    OUT[op + "i"] = f(T["i"])
    OUT[op + "l"] = f(T["long"].view(8, 5).t())
]], inputs)
      for k, v in pairs(got) do
        assert.are.equal(ref[k]:dtype(), v:dtype(), k .. ": dtype")
        local a, b = v:reshape(-1):totable(), ref[k]:reshape(-1):totable()
        for j = 1, #b do
          local same = a[j] == b[j] and (a[j] ~= 0 or 1 / a[j] == 1 / b[j]) or (a[j] ~= a[j] and b[j] ~= b[j])
          assert.is_true(same, string.format("%s %s[%d]: %s vs PyTorch %s", isa, k, j, tostring(a[j]), tostring(b[j])))
        end
      end
      core.set_cpu_kernels(prev)
    end)
  end
  it("have a zero gradient, also where the upstream one is NaN or inf", function()
    for _, op in ipairs(OPS) do
      local x = ddp.tensor({ 0.3, -1.7, 2.5 }, { dtype = "float64" }):requires_grad_()
      x[op](x):backward(ddp.tensor({ 0 / 0, math.huge, 1 }, { dtype = "float64" }))
      assert.are.same({ 0, 0, 0 }, x.grad:totable(), op)
      assert.are.same({ 2 }, ddp[op](ddp.zeros(2)):size())
    end
  end)
end)
