-- `ddplua plot RUN_DIR` (lua/ddplua/tools/plot.lua): curves.png from
-- metrics.jsonl with gnuplot, resumed runs, damaged logs, missing gnuplot.
local core = require "ddplua.core"
local U = require "helpers.io_util"

local PLOT = "lua/ddplua/tools/plot.lua"

local function jsonl(records)
  local lines = {}
  for i, r in ipairs(records) do lines[i] = core.json_encode(r) end
  return table.concat(lines, "\n") .. "\n"
end

-- The inline data block of one series in curves.gp, as {{x, y}, ...}.
local function datablock(gp, panel, series)
  local body = gp:match("%$d" .. panel .. "_" .. series .. " << EOD\n(.-)\nEOD")
  local out = {}
  for x, y in (body or ""):gmatch("(%S+) (%S+)") do out[#out + 1] = { tonumber(x), tonumber(y) } end
  return out
end

describe("plot", function()
  local dir
  before_each(function() dir = U.tmpdir() end)
  after_each(function() U.rm_rf(dir) end)

  it("draws loss and accuracy per step and per epoch into curves.png", function()
    local recs = {}
    for s = 1, 30 do
      recs[#recs + 1] = { kind = "step", step = s, epoch = (s - 1) // 10 + 1, loss = 1 / s, acc = s / 30, lr = 0.1 }
    end
    for e = 1, 3 do
      recs[#recs + 1] = { kind = "epoch", epoch = e, loss = 1 / e, val_loss = 1.5 / e, val_acc = e / 4 }
    end
    U.write(dir .. "/metrics.jsonl", jsonl(recs))
    local ok, out = U.run_ddplua(PLOT, { dir })
    assert.is_true(ok, out)
    assert.matches("wrote " .. dir .. "/curves.png", out, 1, true)
    local png = U.read(dir .. "/curves.png")
    assert.are.equal("\137PNG\r\n\26\n", png:sub(1, 8))
    assert.is_true(#png > 5000)
    local gp = U.read(dir .. "/curves.gp")
    for _, title in ipairs { "loss per step", "accuracy per step", "loss per epoch", "accuracy per epoch" } do
      assert.matches('set title "' .. title .. '"', gp, 1, true)
    end
    assert.are.same({ 1, 1 }, datablock(gp, 1, 1)[1])          -- loss per step: step 1, loss 1
    assert.are.same({ 30, 1 / 30 }, datablock(gp, 1, 1)[30])
    assert.are.same({ 3, 0.75 }, datablock(gp, 4, 1)[3])       -- val_acc per epoch
    assert.are.equal(2, select(2, gp:gsub("%$d3_%d << EOD", ""))) -- loss and val_loss per epoch
    assert.is_nil(gp:find('"lr"', 1, true))                    -- neither loss nor accuracy
  end)

  it("lets the later record win for a step logged twice (a resumed run) and sorts by step", function()
    U.write(dir .. "/metrics.jsonl", jsonl {
      { kind = "step", step = 1, loss = 5 }, { kind = "step", step = 2, loss = 4 },
      { kind = "step", step = 3, loss = 3 }, { kind = "step", step = 2, loss = 2.5 },
      { kind = "step", step = 3, loss = 2 },
    })
    local ok, out = U.run_ddplua(PLOT, { dir, "--out", dir .. "/other.png" })
    assert.is_true(ok, out)
    assert.are.equal("file", core.file_type(dir .. "/other.png"))
    assert.are.same({ { 1, 5 }, { 2, 2.5 }, { 3, 2 } }, datablock(U.read(dir .. "/curves.gp"), 1, 1))
  end)

  it("skips an unterminated last line (a run killed mid-write) but names a bad line elsewhere", function()
    U.write(dir .. "/metrics.jsonl", jsonl { { kind = "step", step = 1, loss = 1 } } .. '{"kind":"step","st')
    local ok, out = U.run_ddplua(PLOT, { dir })
    assert.is_true(ok, out)
    U.write(dir .. "/metrics.jsonl", jsonl { { kind = "step", step = 1, loss = 1 } } .. "{oops}\n" ..
      jsonl { { kind = "step", step = 2, loss = 1 } })
    ok, out = U.run_ddplua(PLOT, { dir })
    assert.is_false(ok)
    assert.matches(dir .. "/metrics.jsonl:2: invalid JSON at byte 1", out, 1, true)
  end)

  it("explains a directory without metrics, metrics without curves, and a missing gnuplot", function()
    local ok, out = U.run_ddplua(PLOT, { dir .. "/nope" })
    assert.is_false(ok)
    assert.matches("nope is not a directory", out, 1, true)
    ok, out = U.run_ddplua(PLOT, { dir })
    assert.is_false(ok)
    assert.matches("metrics.jsonl does not exist", out, 1, true)
    U.write(dir .. "/metrics.jsonl", jsonl { { kind = "step", step = 1, lr = 0.1 } })
    ok, out = U.run_ddplua(PLOT, { dir })
    assert.is_false(ok)
    assert.matches("has no loss or accuracy values", out, 1, true)
    U.write(dir .. "/metrics.jsonl", jsonl { { kind = "step", step = 1, loss = 0.1 } })
    ok, out = U.run_ddplua(U.abspath(PLOT), { dir }, { PATH = "/nonexistent" })
    assert.is_false(ok)
    assert.matches("gnuplot was not found on PATH; install it (Debian: apt-get install gnuplot-nox)", out, 1, true)
    ok, out = U.run_ddplua(PLOT, {})
    assert.is_false(ok)
    assert.matches("usage: ddplua plot RUN_DIR", out, 1, true)
  end)

  it("is usable as a module", function()
    U.write(dir .. "/metrics.jsonl",
      jsonl { { kind = "epoch", epoch = 1, acc = 0.5 }, { kind = "epoch", epoch = 2, acc = 0.7 } })
    local plot = require "ddplua.tools.plot"
    assert.are.equal(dir .. "/curves.png", plot.plot(dir))
    assert.are.equal("file", core.file_type(dir .. "/curves.png"))
  end)
end)
