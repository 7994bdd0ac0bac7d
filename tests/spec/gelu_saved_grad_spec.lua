-- GELU on the CPU saves its derivative in the forward (backend.h
-- unary_with_grad; ops/elementwise.c): the backward is gy * d instead of
-- recomputing Phi and phi from x. Its gradients must be the recomputing
-- path's bit for bit. A non-contiguous input declines the saving path, so
-- the same values through a transposed view give the reference. (bfloat16
-- declines too: its contiguous GELU and backward look up a table made from
-- the same float32 kernels, cpu_gelu_table.c; here it meets the widening path.)
local ddp = require "ddplua"

local function same_bits(a, b, what)
  assert.equal(b:dtype(), a:dtype(), what)
  require("helpers.bits").same_bits(a, b, what, "recomputing")
end

local function input(rows, cols, dtype)
  ddp.manual_seed(rows * cols)
  local x = ddp.randn(rows, cols) * 4
  local special = { 0 / 0, math.huge, -math.huge, 0, -0.0, 1e-30, -13.5, 13.5, -40, 3e38 }
  local flat = x:view(-1)
  for i = 1, math.min(#special, rows * cols) do flat[i] = special[i] end
  return x:to(dtype)
end

describe("GELU's saved derivative", function()
  for _, dtype in ipairs({ "float32", "bfloat16" }) do
    for _, sz in ipairs({ { 1, 1 }, { 3, 7 }, { 64, 512 }, { 37, 1030 } }) do
      it(string.format("%s [%d, %d]: the recomputing backward's gradient, bit for bit", dtype, sz[1], sz[2]), function()
        local x, gy = input(sz[1], sz[2], dtype), input(sz[2], sz[1], dtype):t():contiguous()
        local a = x:clone():requires_grad_()
        local y = a:gelu()
        y:backward(gy)
        -- the same values as a transposed (non-contiguous) view of a leaf: the backend declines to save
        local base = x:t():contiguous():requires_grad_()
        local yr = base:t():gelu()
        yr:backward(gy)
        same_bits(y, yr, "forward")
        same_bits(a.grad, base.grad:t(), "gradient")
        same_bits(y, x:gelu(), "forward without autograd")
      end)
    end
  end

  it("matches float64 GELU's derivative to float32 precision", function()
    local x = ddp.arange(-900, 901):float() / 100
    local a = x:clone():requires_grad_()
    a:gelu():sum():backward()
    local xd = x:double()
    local cdf = (xd * (1 / math.sqrt(2))):erf() * 0.5 + 0.5
    local pdf = (xd * xd * -0.5):exp() * (1 / math.sqrt(2 * math.pi))
    local want = cdf + xd * pdf
    local err = (a.grad:double() - want):abs():max():item()
    assert(err < 4e-7, "max error " .. err)
  end)
end)
