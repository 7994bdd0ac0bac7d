-- The float32 recurrent cells (src/backends/cpu/cpu_rnn_cell_t.h, one
-- vectorised kernel per ISA) against the float64 cells (cpu_rnn.c's scalar
-- reference, ops/model_math.h): core._rnn_layer's outputs, last states and
-- every gradient, for each mode, both directions, on every kernel set this
-- CPU runs, with hidden sizes that leave a partial vector (13, 17, 200 =
-- 12 x 16 + 8), one row, one step, and pre-activations large enough to
-- saturate the sigmoids and tanh on both sides.
local ddp = require "ddplua"
local R = require "helpers.ref"
local core = ddp.core

local kernels = R.cpu_kernel_sets
local ISAS = kernels()
local GATES = { LSTM = 4, GRU = 3, RNN_TANH = 1, RNN_RELU = 1 }

-- {T, N, H, scale of the input projection}
local SIZES = { { 1, 1, 13, 1 }, { 6, 3, 17, 1 }, { 4, 2, 200, 1 }, { 3, 5, 21, 12 }, { 1, 4, 16, 30 } }

-- y, h, c and the gradients of a fixed weighted sum w.r.t. xp, w, b, h0, c0
local function run(mode, dt, inputs, reverse, gy)
  local t = {}
  for i, v in ipairs(inputs) do t[i] = v:to(dt):clone():requires_grad_() end
  local y, h, c = core._rnn_layer(mode, t[1], t[2], t[3], t[4], mode == "LSTM" and t[5] or nil, reverse)
  local loss = (y * gy[1]:to(dt)):sum() + (h * gy[2]:to(dt)):sum()
  if c then loss = loss + (c * gy[3]:to(dt)):sum() end
  loss:backward()
  local out = { y = y:detach(), h = h:detach(), c = c and c:detach() }
  for i, name in ipairs({ "xp", "w_hh", "b_hh", "h0", "c0" }) do out[name] = t[i].grad end
  return out
end

local function case(mode, size, seed)
  local T, N, H, scale = table.unpack(size)
  local G = GATES[mode]
  local inputs = { R.randn({ T, N, G * H }, seed, scale), R.randn({ G * H, H }, seed + 1, 1 / math.sqrt(H)),
    R.randn({ G * H }, seed + 2, 0.5), R.randn({ N, H }, seed + 3), R.randn({ N, H }, seed + 4, 2) }
  local gy = { R.randn({ T, N, H }, seed + 5), R.randn({ N, H }, seed + 6), R.randn({ N, H }, seed + 7) }
  return inputs, gy
end

describe("float32 recurrent cells", function()
  it("run on every kernel set this CPU has (at least the baseline)", function()
    assert.is_true(#ISAS >= 1)
    assert.equal("base", ISAS[#ISAS])
  end)

  for _, isa in ipairs(ISAS) do
    it(isa .. ": match the float64 cells, outputs, states and every gradient", function()
      local prev = core.set_cpu_kernels(isa)
      local ok, err = pcall(function()
        local seed = 100
        for _, mode in ipairs({ "LSTM", "GRU", "RNN_TANH", "RNN_RELU" }) do
          for si, size in ipairs(SIZES) do
            for _, reverse in ipairs({ false, true }) do
              seed = seed + 10
              local inputs, gy = case(mode, size, seed)
              local a, b = run(mode, "float32", inputs, reverse, gy), run(mode, "float64", inputs, reverse, gy)
              local what = string.format("%s %s size %d%s", isa, mode, si, reverse and " reverse" or "")
              for _, k in ipairs({ "y", "h", "c", "xp", "w_hh", "b_hh", "h0", "c0" }) do
                if b[k] then
                  -- the gradients sum over steps and rows (up to 24 terms of
                  -- size ~1) in float32
                  R.assert_close(a[k], R.from(b[k]), 2e-5, 2e-5, what .. " " .. k)
                else
                  assert.is_nil(a[k], what .. " " .. k)
                end
              end
            end
          end
        end
      end)
      core.set_cpu_kernels(prev)
      assert(ok, err)
    end)
  end

  it("saturate like the float64 cells: sigmoid 0 and 1, tanh -1 and 1, no NaN", function()
    for _, isa in ipairs(ISAS) do
      local prev = core.set_cpu_kernels(isa)
      -- pre-activations from -200 to 200: exp(-|x|) underflows, tanh rounds to +-1
      local H = 19
      local xp = (ddp.arange(4 * H):float() * (400 / (4 * H - 1)) - 200):view(1, 1, 4 * H)
      local w = ddp.zeros(4 * H, H)
      local y, h, c = core._rnn_layer("LSTM", xp, w, nil, nil, ddp.full({ 1, H }, 3.0), false)
      local y64, h64, c64 = core._rnn_layer("LSTM", xp:double(), w:double(), nil, nil, ddp.full({ 1, H }, 3.0,
        { dtype = "float64" }), false)
      core.set_cpu_kernels(prev)
      R.assert_close(y, R.from(y64), 1e-7, 1e-6, isa .. " y")
      R.assert_close(c, R.from(c64), 1e-7, 1e-6, isa .. " c")
      R.assert_close(h, R.from(h64), 1e-7, 1e-6, isa .. " h")
      assert.equal(0, y:ne(y):sum():item(), isa .. " NaN")
    end
  end)
end)
