-- Dropout's float32 kernels (the vectorised Philox of cpu_vec_ew_t.h, one
-- per kernel set) against the float64 path, which draws each element's
-- number with the scalar dp_philox_uniform_f: the same elements kept, bit
-- for bit, at lengths that leave partial steps, at counter offsets that
-- cross 2^32 (the counter's high word), with NaN and infinities (a dropped
-- NaN is 0, a kept one NaN), on one thread and two.
local ddp = require "ddplua"
local R = require "helpers.ref"
local core = ddp.core

local ISAS = R.cpu_kernel_sets()

-- n values, multiples of 1/8 (times 2, 1.25 or 4 they stay exact in float32), with specials at the start
local function values(n)
  local t = {}
  local special = { 0 / 0, math.huge, -math.huge, 0, -0.0 }
  for i = 1, n do t[i] = special[i] or ((i * 37) % 101 - 50) / 8 end
  return t
end

local function same_bits(a, b, what) require("helpers.bits").same_bits(a, b, what, "the float64 path") end

describe("dropout's float32 kernels", function()
  for _, isa in ipairs(ISAS) do
    for _, threads in ipairs({ 1, 2 }) do
      it(isa .. ", " .. threads .. " thread(s): keep the float64 path's elements, bit for bit", function()
        local prev = core.set_cpu_kernels(isa)
        ddp.set_num_threads(threads)
        local ok, err = pcall(function()
          for _, n in ipairs({ 1, 7, 31, 32, 33, 63, 64, 65, 100, 1000, 4099 }) do
            local t = values(n)
            local x32, x64 = ddp.tensor(t), ddp.tensor(t, { dtype = "float64" })
            for _, off in ipairs({ 0, 12345, (1 << 32) - 40, (3 << 32) + 5 }) do
              for _, p in ipairs({ 0.2, 0.5, 0.75 }) do
                core.set_rng_state({ seed = 0x1234567890ab, offset = off })
                local y32 = ddp.dropout(x32, p, true)
                core.set_rng_state({ seed = 0x1234567890ab, offset = off })
                local y64 = ddp.dropout(x64, p, true)
                same_bits(y32, y64, string.format("n=%d offset=%d p=%g", n, off, p))
              end
            end
          end
          -- the mask is not all-or-nothing: about p of a long row dropped
          core.set_rng_state({ seed = 7, offset = (1 << 32) - 1000 })
          local y = ddp.dropout(ddp.ones(20000), 0.3, true)
          local dropped = (y:eq(0)):double():sum():item()
          assert.is_true(math.abs(dropped - 6000) < 400, dropped .. " dropped")
        end)
        core.set_cpu_kernels(prev)
        ddp.set_num_threads(1)
        if not ok then error(err, 0) end
      end)
    end
  end
end)
