-- The run directory, metrics.jsonl, and the progress bar (terminal and
-- plain modes, rank 0 only).
local ddp = require "ddplua"
local core = require "ddplua.core"
local metrics = require "ddplua.metrics"
local progress = require "ddplua.progress"
local U = require "helpers.io_util"

-- A process group on rank `r` of `n`, as ddplua.rank sees one.
local function with_fake_rank(r, n, fn)
  local saved = package.loaded["ddplua.distributed"]
  package.loaded["ddplua.distributed"] = {
    is_initialized = function() return true end,
    get_rank = function() return r end,
    get_world_size = function() return n end,
  }
  local ok, err = pcall(fn)
  package.loaded["ddplua.distributed"] = saved
  if not ok then error(err, 0) end
end

local function read_records(path)
  local out = {}
  for line in U.read(path):gmatch("[^\n]+") do out[#out + 1] = core.json_decode(line) end
  return out
end

describe("run directory", function()
  local dir
  before_each(function()
    dir = U.tmpdir()
    metrics.reset_run_dir()
  end)
  after_each(function()
    metrics.reset_run_dir()
    U.rm_rf(dir)
  end)

  it("uses dir=, or root/name, creates it, and keeps the first choice", function()
    assert.are.equal(dir .. "/x/y", metrics.run_dir { dir = dir .. "/x/y" })
    assert.are.equal("directory", core.file_type(dir .. "/x/y"))
    assert.are.equal(dir .. "/x/y", metrics.run_dir())
    assert.are.equal(dir .. "/runs/exp1", metrics.run_dir { root = dir .. "/runs", name = "exp1" })
    assert.are.equal("directory", core.file_type(dir .. "/runs/exp1"))
    local ok, err = pcall(metrics.run_dir, { name = "a/b", root = dir })
    assert.is_false(ok)
    assert.matches("without '/'", err)
  end)

  it("names an unnamed run by date and time, with a suffix when that exists", function()
    local now = os.time()
    for dt = 0, 2 do core.mkdir(dir .. "/" .. os.date("%Y%m%d-%H%M%S", now + dt)) end
    local d = metrics.run_dir { root = dir }
    assert.matches("^" .. dir:gsub("%p", "%%%0") .. "/%d%d%d%d%d%d%d%d%-%d%d%d%d%d%d%-2$", d)
    assert.are.equal("directory", core.file_type(d))
  end)

  it("follows DDPLUA_RUN_DIR in a ddplua process", function()
    U.write(dir .. "/s.lua", 'print(require("ddplua").metrics.run_dir())')
    local ok, out = U.run_ddplua(dir .. "/s.lua", {}, { DDPLUA_RUN_DIR = dir .. "/from_env" })
    assert.is_true(ok, out)
    assert.are.equal(dir .. "/from_env\n", out)
    assert.are.equal("directory", core.file_type(dir .. "/from_env"))
  end)
end)

describe("metrics.jsonl", function()
  local dir
  before_each(function()
    dir = U.tmpdir()
    metrics.reset_run_dir()
  end)
  after_each(function()
    metrics.reset_run_dir()
    U.rm_rf(dir)
  end)

  it("appends flushed step and epoch records, counting steps and epochs by itself", function()
    local log = ddp.metrics.open { dir = dir .. "/run", config = { lr = 0.1 } }
    log:log { loss = 0.5, acc = ddp.tensor(0.25) }
    log:log { loss = 0.4 }
    log:log { step = 10, epoch = 1, loss = ddp.tensor({ { 0.3 } }), note = "x", ok = true }
    log:log_epoch { val_loss = 0.35 }
    -- readable while the logger is still open: every record is flushed
    local r = read_records(dir .. "/run/metrics.jsonl")
    assert.are.equal(4, #r)
    assert.are.same({ "step", 1, 0.5, 0.25 }, { r[1].kind, r[1].step, r[1].loss, r[1].acc })
    assert.are.same({ "step", 2, 0.4 }, { r[2].kind, r[2].step, r[2].loss })
    assert.are.same({ 10, 1, "x", true }, { r[3].step, r[3].epoch, r[3].note, r[3].ok })
    assert.are.equal(ddp.tensor({ { 0.3 } }):item(), r[3].loss)
    assert.are.same({ "epoch", 1, 0.35 }, { r[4].kind, r[4].epoch, r[4].val_loss })
    for i = 2, #r do assert.is_true(r[i].time >= r[i - 1].time) end
    assert.are.same({ lr = 0.1 }, core.yaml_load(dir .. "/run/config.yaml"))
    log:close()
    -- a second logger on the same run appends
    local log2 = ddp.metrics.open { dir = dir .. "/run" }
    log2:log { loss = 0.1 }
    log2:close()
    assert.are.equal(5, #read_records(dir .. "/run/metrics.jsonl"))
  end)

  it("rejects values it cannot log, naming the key", function()
    local log = ddp.metrics.open { dir = dir .. "/run" }
    local cases = {
      { { loss = ddp.ones(3) }, "'loss' is a tensor of 3 elements" },
      { { loss = {} }, "'loss' is a table" },
      { { kind = "x" }, "'kind' is written by the logger" },
      { { step = 1.5 }, "'step' must be an integer" },
    }
    for _, c in ipairs(cases) do
      local ok, err = pcall(log.log, log, c[1])
      assert.is_false(ok)
      assert.matches(c[2], err, 1, true)
    end
    log:close()
    local ok, err = pcall(log.log, log, { loss = 1 })
    assert.is_false(ok)
    assert.matches("is closed", err)
  end)

  it("writes nothing on ranks other than 0", function()
    with_fake_rank(1, 2, function()
      local log = ddp.metrics.open { dir = dir .. "/run1" }
      log:log { loss = 1 }
      log:log_epoch { loss = 1 }
      log:close()
    end)
    assert.is_false(U.exists(dir .. "/run1"))
  end)
end)

describe("progress", function()
  -- Captures writes; the clock is set by the test.
  local function fixture(opts)
    local cap = { text = "", writes = 0 }
    function cap:write(...)
      for _, s in ipairs({ ... }) do self.text = self.text .. s end
      self.writes = self.writes + 1
    end
    function cap:flush() end
    local now = 0
    opts.out, opts.clock, opts.enabled = cap, function() return now end, opts.enabled ~= false
    local total = opts.total
    opts.total = nil
    local bar = progress.new(total, opts)
    return bar, cap, function(t) now = t end
  end

  it("redraws one line on a terminal with percentage, rate and ETA", function()
    local bar, cap, at = fixture { total = 100, desc = "ep", batch_size = 10, tty = true, width = 10 }
    at(5)
    bar:update(25, { loss = 0.5 })
    -- 250 samples in 5 s; 75 steps left at 0.2 s each
    assert.are.equal("\rep  25%|##        | 25/100 [00:05<00:15, 50.0 samples/s] loss=0.5", cap.text)
    local writes = cap.writes
    at(5.05)
    bar:update(1)
    assert.are.equal(writes, cap.writes) -- at most ten redraws a second
    at(20)
    bar:update(74, { loss = 0.125, acc = 0.75 })
    bar:close()
    local final = "\rep 100%|##########| 100/100 [00:20<00:00, 50.0 samples/s] acc=0.75 loss=0.125\n"
    assert.are.equal(final, cap.text:sub(-#final))
  end)

  it("prints plain periodic lines when not on a terminal", function()
    local bar, cap, at = fixture { total = 40, desc = "epoch 2", tty = false, every = 10 }
    for t = 1, 9 do
      at(t)
      bar:update(1)
    end
    assert.are.equal("", cap.text)
    at(10)
    bar:update(1, { samples = 100 })
    assert.are.equal("epoch 2: 10/40 (25%) 10.0 samples/s, elapsed 00:10, ETA 00:30\n", cap.text)
    at(100)
    bar:close({ loss = 2 })
    assert.matches("\nepoch 2: 10/40 %(25%%%) 1.0 samples/s, elapsed 01:40, loss=2\n$", cap.text)
  end)

  it("counts steps per second when the number of samples is unknown, and does nothing when disabled", function()
    local bar, cap, at = fixture { tty = false, every = 1 }
    at(2)
    bar:update(4)
    assert.are.equal("4 2.0 it/s, elapsed 00:02\n", cap.text)
    local off, cap2 = fixture { total = 3, tty = true, enabled = false }
    off:update(1)
    off:close()
    assert.are.equal("", cap2.text)
    with_fake_rank(1, 2, function()
      local p = progress.new(3, { out = cap2, tty = true })
      p:update(1)
      p:close()
    end)
    assert.are.equal("", cap2.text)
  end)

  it("uses a terminal only when stdout is one and ranks are not prefixed", function()
    local script = "local p = require('ddplua').progress(2, {every = 0}); p:update(1); p:update(1); p:close()"
    local cmd = U.quote(U.ddplua) .. " /dev/stdin <<'EOF'\n" .. script .. "\nEOF"
    local ok, out = U.run("script -qec " .. U.quote(cmd) .. " /dev/null")
    assert.is_true(ok, out)
    assert.matches("\r 50%%|", out)
    ok, out = U.run("DDPLUA_RANK_PREFIX=1 script -qec " .. U.quote(cmd) .. " /dev/null")
    assert.is_true(ok, out)
    assert.is_nil(out:find("|", 1, true))
    assert.matches("1/2 %(50%%%)", out)
  end)
end)
