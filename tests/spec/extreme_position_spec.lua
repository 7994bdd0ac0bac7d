-- argmax/argmin/max/min's first position (cpu_vec_rows_t.h's v_arg_extreme: pass 2 tests blocks of 64 lanes,
-- then the hit block element by element): ties and NaN anywhere, on every kernel set.
local ddp = require "ddplua"
local core = ddp.core
local R = require "helpers.ref"

describe("the first position of an extreme", function()
  for _, isa in ipairs(R.cpu_kernel_sets()) do
    it(isa .. ": ties, NaN, block edges, signed zeros", function()
      local prev = core.set_cpu_kernels(isa)
      for _, n in ipairs({ 1, 63, 64, 65, 127, 128, 129, 1000 }) do
        for _, at in ipairs({ { 1, n }, { n, n }, { math.max(1, n - 64), n }, { n // 2 + 1, n } }) do
          local v = ddp.zeros(n)
          v[at[2]] = 5
          v[at[1]] = 5 -- the first of the tied maxima: at[1] (<= at[2])
          local low = n // 3 + 1 -- a smaller value elsewhere
          if low ~= at[1] and low ~= at[2] then v[low] = -3 end
          local want = math.min(at[1], at[2])
          assert.are.equal(want, v:argmax():item(), isa .. " n " .. n)
          assert.are.equal(5, v:max():item())
          local neg = -v
          assert.are.equal(want, neg:argmin():item())
          if n >= 3 then
            local w = v:clone()
            w[n] = 0 / 0
            w[math.max(2, n - 1)] = 0 / 0
            assert.are.equal(math.max(2, n - 1), w:argmax():item(), "NaN wins, the first")
            assert.is_true(w:max():item() ~= w:max():item())
            assert.are.equal(math.max(2, n - 1), w:argmin():item())
          end
        end
      end
      -- signed zeros: the first of the equal zeros is the value
      local z = ddp.tensor({ -1, -0.0, 0.0, -2 }, { dtype = "float32" })
      assert.are.equal(-math.huge, 1 / z:max():item())
      core.set_cpu_kernels(prev)
    end)
  end
end)
