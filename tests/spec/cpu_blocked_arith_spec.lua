-- The blocked + - * / loops of the float32 CPU kernels (blocked_arith in
-- src/backends/cpu/cpu_vec_ew_t.h: whole blocks of two vectors, loads before
-- stores, then the vectoriser's loop for the rest), on every kernel set this
-- CPU has. One IEEE operation on float32 values rounds once, and float64
-- holds the exact sum, difference and product of two float32 values and
-- rounds their quotient innocuously (53 >= 2 * 24 + 2 bits), so every result
-- must equal the float64 one rounded to float32 bit for bit: at every length
-- from 0 past three blocks (so the tail after the blocks takes each length),
-- with the number on either side, in place through either operand, on rows
-- of a broadcast, and on the specials (+-0, +-inf, NaN, huge and tiny).
local ddp = require "ddplua"
local R = require "helpers.ref"
local bits = require "helpers.bits"
local core = ddp.core

-- (no denormals: float32 math flushes them, ddp.set_flush_denormal)
local SPECIAL = { 0, -0.0, 1e-30, -1e-30, 0.5, -3, 1e30, -1e30, 3e38, -3e38, math.huge, -math.huge, 0 / 0 }

-- n float32-representable values (as float64), the specials among them
local function values(n, seed, shift)
  local t = R.randn({ n }, seed, 1):mul(3):add(shift or 0):totable()
  for i, v in ipairs(SPECIAL) do
    if i <= n then t[(i * 7 + seed) % n + 1] = v end
  end
  return ddp.tensor(t, { dtype = "float64" }):float():double()
end

local OPS = { "add", "sub", "mul", "div" }

describe("blocked float32 + - * /", function()
  for _, isa in ipairs(R.cpu_kernel_sets()) do
    describe(isa .. ":", function()
      local prev
      setup(function() prev = core.set_cpu_kernels(isa) end)
      teardown(function() core.set_cpu_kernels(prev) end)

      it("round once at every length 0-70, with the number on either side", function()
        for n = 0, 70 do
          local a64, b64 = values(n, n + 1), values(n, n + 2, 0.125)
          local a, b = a64:float(), b64:float()
          for _, op in ipairs(OPS) do
            local what = string.format("%s at length %d", op, n)
            bits.same_bits(ddp[op](a, b), ddp[op](a64, b64):float(), what, "float64")
            bits.same_bits(ddp[op](a, 0.375), ddp[op](a64, 0.375):float(), what .. ", tensor op number", "float64")
            bits.same_bits(ddp[op](-1.75, a), ddp[op](-1.75, a64):float(), what .. ", number op tensor", "float64")
          end
        end
      end)

      it("write in place through either operand, and into itself", function()
        for _, n in ipairs({ 15, 16, 17, 33, 64, 1000 }) do
          local a64, b64 = values(n, 3), values(n, 4, 0.5)
          for _, op in ipairs(OPS) do
            local want = ddp[op](a64, b64):float()
            local x = a64:float()
            x[op .. "_"](x, b64:float())
            bits.same_bits(x, want, op .. "_ into the left operand, length " .. n, "float64")
            local y = b64:float()
            local out = ddp[op](a64:float(), y)
            bits.same_bits(out, want, op .. ", length " .. n, "float64")
            local z = a64:float()
            z[op .. "_"](z, z)
            bits.same_bits(z, ddp[op](a64, a64):float(), op .. "_ of a tensor with itself, length " .. n, "float64")
          end
        end
      end)

      it("compute each row of a broadcast, at row lengths on both sides of a block", function()
        for _, cols in ipairs({ 7, 16, 31, 32, 33, 1024 }) do
          local a64, b64 = values(5 * cols, cols):reshape(5, cols), values(cols, cols + 9, 0.25)
          for _, op in ipairs(OPS) do
            local what = string.format("%s [5, %d] with [%d]", op, cols, cols)
            bits.same_bits(ddp[op](a64:float(), b64:float()), ddp[op](a64, b64):float(), what, "float64")
            bits.same_bits(ddp[op](b64:float(), a64:float()), ddp[op](b64, a64):float(), what .. ", swapped", "float64")
          end
        end
      end)
    end)
  end
end)
