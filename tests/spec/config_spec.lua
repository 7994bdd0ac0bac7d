-- ddp.config: precedence defaults < YAML < key=value, type checks, unknown
-- keys, YAML errors, argument consumption, DDPLUA_CONFIG, rank-0 printing
-- and the saved config.yaml.
local ddp = require "ddplua"
local core = require "ddplua.core"
local U = require "helpers.io_util"

local function defaults()
  return {
    epochs = 5,
    lr = 0.05,
    name = "mlp",
    amp = false,
    layers = { 256, 128 },
    betas = { 0.9, 0.999 },
    model = { hidden = 128, act = "relu", init = { std = 0.02 } },
    extra = {},
  }
end

-- Resolves with the given arguments, no printing, no run directory.
local function resolve(args, d)
  args = args or {}
  return ddp.config(d or defaults(), { arg = args, print = false, save = false }), args
end

local function config_error(args, d)
  local ok, err = pcall(resolve, args, d)
  assert.is_false(ok, "expected an error for " .. table.concat(args, " "))
  return err
end

describe("ddp.config", function()
  local dir
  before_each(function() dir = U.tmpdir() end)
  after_each(function() U.rm_rf(dir) end)

  it("returns a copy of the defaults when nothing overrides them", function()
    local d = defaults()
    local cfg = resolve({}, d)
    assert.are.same(defaults(), cfg)
    cfg.model.hidden = 1
    assert.are.equal(128, d.model.hidden)
  end)

  it("applies defaults < YAML < command line, and leaves the launcher's keys out", function()
    U.write(dir .. "/run.yaml", [[
ddplua:
  nproc: 2
  backend: cpu
script: train.lua
epochs: 7
lr: 0.1
model:
  hidden: 64
extra:
  anything: [1, 2]
]])
    local cfg, args = resolve({ "--config", dir .. "/run.yaml", "lr=0.2", "model.act=gelu", "data.csv" })
    assert.are.equal(7, cfg.epochs)             -- YAML over default
    assert.are.equal(0.2, cfg.lr)               -- command line over YAML
    assert.are.equal(64, cfg.model.hidden)      -- YAML, nested
    assert.are.equal("gelu", cfg.model.act)     -- command line, nested
    assert.are.equal(0.02, cfg.model.init.std)  -- default kept inside a merged section
    assert.are.same({ anything = { 1, 2 } }, cfg.extra)
    assert.is_nil(cfg.ddplua)
    assert.is_nil(cfg.script)
    assert.are.same({ "data.csv" }, args)
  end)

  it("lets later overrides win and accepts --config=path and config=path", function()
    U.write(dir .. "/a.yaml", "epochs: 9\n")
    local cfg = resolve({ "--config=" .. dir .. "/a.yaml", "epochs=1", "epochs=2" })
    assert.are.equal(2, cfg.epochs)
    cfg = resolve({ "config=" .. dir .. "/a.yaml" })
    assert.are.equal(9, cfg.epochs)
  end)

  it("consumes only its own arguments and stops at --", function()
    local cfg, args = resolve({ "in.txt", "epochs=3", "-v", "--", "lr=0.5", "out.txt" })
    assert.are.equal(3, cfg.epochs)
    assert.are.equal(0.05, cfg.lr)
    assert.are.same({ "in.txt", "-v", "lr=0.5", "out.txt" }, args)
  end)

  it("types values like the defaults", function()
    local cfg = resolve({ "lr=1", "name=123", "amp=true", "layers=[64, 32, 16]", "betas=[0, 0.5]", "extra.k=v" })
    assert.are.equal("float", math.type(cfg.lr))    -- a float default takes an integer, stored as a float
    assert.are.equal(1.0, cfg.lr)
    assert.are.equal("123", cfg.name)                 -- a string default takes the text verbatim
    assert.are.equal(true, cfg.amp)
    assert.are.same({ 64, 32, 16 }, cfg.layers)
    assert.are.same({ 0.0, 0.5 }, cfg.betas)
    assert.are.equal("float", math.type(cfg.betas[1]))
    assert.are.same({ k = "v" }, cfg.extra)
    cfg = resolve({ "model={hidden: 32}" })
    assert.are.equal(32, cfg.model.hidden)
    assert.are.equal("relu", cfg.model.act)
  end)

  it("names the key, the value and the expected type on a mismatch", function()
    local cases = {
      { { "epochs=abc" }, 'config: epochs = "abc" (command line epochs=abc) must be an integer, like its default 5' },
      { { "epochs=5.0" }, "epochs = 5.0 (command line epochs=5.0) must be an integer" },
      { { "lr=fast" }, 'lr = "fast" (command line lr=fast) must be a number, like its default 0.05' },
      { { "amp=1" }, "amp = 1 (command line amp=1) must be true or false" },
      { { "layers=[1, x]" }, 'layers[2] = "x" (command line layers=[1, x]) must be an integer' },
      { { "layers=3" }, "layers = 3 (command line layers=3) must be a list" },
      { { "model=3" }, "model = 3 (command line model=3) must be a mapping" },
      { { "model.hidden.x=3" }, "'model.hidden' is an integer, not a section" },
    }
    for _, c in ipairs(cases) do
      assert.matches(c[2], config_error(c[1]), 1, true)
    end
    U.write(dir .. "/t.yaml", "model:\n  hidden: wide\n")
    local err = config_error({ "--config", dir .. "/t.yaml" })
    assert.matches('model.hidden = "wide" (' .. dir .. '/t.yaml) must be an integer, like its default 128', err, 1,
      true)
  end)

  it("lists the valid keys (dotted) for an unknown key, from the command line or the YAML", function()
    local valid = "valid keys: amp, betas, epochs, extra.*, layers, lr, model.act, model.hidden, model.init.std, name"
    local err = config_error({ "lrr=0.1" })
    assert.matches("config: unknown key 'lrr' (command line lrr=0.1); " .. valid, err, 1, true)
    err = config_error({ "model.hiden=3" })
    assert.matches("unknown key 'model.hiden'", err, 1, true)
    assert.matches(valid, err, 1, true)
    U.write(dir .. "/u.yaml", "model:\n  init:\n    mean: 0\n")
    err = config_error({ "--config", dir .. "/u.yaml" })
    assert.matches("unknown key 'model.init.mean' (" .. dir .. "/u.yaml); " .. valid, err, 1, true)
  end)

  it("names file, line and column of a YAML syntax error", function()
    U.write(dir .. "/bad.yaml", "epochs: 5\nmodel:\n  hidden: [64, 32\nlr: 0.1\n")
    local err = config_error({ "--config", dir .. "/bad.yaml" })
    assert.matches("config: " .. dir:gsub("%p", "%%%0") .. "/bad.yaml:%d+:%d+: ", err)
    err = config_error({ "--config", dir .. "/missing.yaml" })
    assert.matches("missing.yaml: cannot open", err, 1, true)
    U.write(dir .. "/list.yaml", "- 1\n- 2\n")
    err = config_error({ "--config", dir .. "/list.yaml" })
    assert.matches("list.yaml must hold a mapping of keys", err, 1, true)
    err = config_error({ "--config" })
    assert.matches("--config needs a file name", err, 1, true)
  end)

  it("bounds a YAML file's nesting, size and alias expansion, naming file, line and column", function()
    -- 30000 levels crashed the reader (one C stack frame per level)
    U.write(dir .. "/deep.yaml", "lr: " .. string.rep("[", 30000) .. string.rep("]", 30000) .. "\n")
    local err = config_error({ "--config", dir .. "/deep.yaml" })
    assert.matches("config: " .. dir .. "/deep.yaml:1:104: nested more than 100 levels deep", err, 1, true)
    local ok, e = pcall(core.yaml_parse, string.rep("- ", 5000) .. "x", "deep text")
    assert.is_false(ok)
    assert.matches("deep text:1:201: nested more than 100 levels deep", e, 1, true)
    -- 100 levels read, and write back
    local hundred = string.rep("[", 99) .. "1" .. string.rep("]", 99)
    local v = core.yaml_parse("a: " .. hundred)
    for _ = 1, 99 do v = v[1] or v.a end
    assert.are.equal(1, v[1])
    -- aliases of aliases: 10^9 values if walked; the result is bounded instead
    local bomb = { "a: &a [x, x, x, x, x, x, x, x, x, x]" }
    for i = 2, 9 do
      local prev = string.char(96 + i - 1)
      bomb[i] = string.char(96 + i) .. ": &" .. string.char(96 + i) .. " [" .. string.rep("*" .. prev, 10, ", ") .. "]"
    end
    U.write(dir .. "/bomb.yaml", table.concat(bomb, "\n") .. "\n")
    err = config_error({ "--config", dir .. "/bomb.yaml" })
    assert.matches("bomb.yaml:6:%d+: the document holds more than 1000000 values %(aliases counted", err)
    -- an alias of a null value is that value (it used to be an unknown alias)
    assert.are.same({ b = { 1 } }, core.yaml_parse("a: &n ~\nb: [1, *n]\n"))
    ok, e = pcall(core.yaml_parse, string.rep("#", 16 * 1024 * 1024 + 1), "big")
    assert.is_false(ok)
    assert.matches("big: the text is larger than 16 MiB", e, 1, true)
    local f = assert(io.open(dir .. "/big.yaml", "wb"))
    f:write("a: 1\n", string.rep("#", 16 * 1024 * 1024), "\n")
    f:close()
    err = config_error({ "--config", dir .. "/big.yaml" })
    assert.matches("big.yaml:%d+:%d+: the file is larger than 16 MiB", err)
  end)

  it("refuses a FIFO or a directory as the YAML file instead of blocking on it", function()
    assert.is_true(U.run("mkfifo " .. U.quote(dir .. "/fifo.yaml")))
    -- in a child process, so that a reader blocked on the FIFO is a failure, not a hung spec
    local ok, out = U.run("cd " .. U.quote(dir) ..
      " && echo 'local ddp = require \"ddplua\"; print(pcall(ddp.config, {a = 1}, {arg = {\"config=fifo.yaml\"}, " ..
      "save = false}))' > s.lua && timeout 20 " .. U.quote(U.abspath(U.ddplua)) .. " s.lua; echo rc=$?")
    assert.is_true(ok, out)
    assert.matches("false\tconfig: fifo.yaml: not a regular file (it is a FIFO)", out, 1, true)
    assert.matches("rc=0", out, 1, true)
    local err = config_error({ "--config", dir })
    assert.matches(dir .. ": not a regular file (it is a directory)", err, 1, true)
  end)

  it("rejects defaults that are not plain configuration values", function()
    local ok, err = pcall(ddp.config, { f = print }, { arg = {}, print = false, save = false })
    assert.is_false(ok)
    assert.matches("default f is a function", err)
    ok, err = pcall(ddp.config, { a = 1 }, { arg = {}, bogus = 1 })
    assert.is_false(ok)
    assert.matches("unknown option 'bogus'", err)
  end)

  describe("in a ddplua process", function()
    local script = [[
local ddp = require "ddplua"
local cfg, dir = ddp.config({epochs = 5, lr = 0.05, model = {hidden = 128}, run_name = "cfgtest"})
print("RESULT", cfg.epochs, cfg.lr, cfg.model.hidden, tostring(dir), #arg, arg[1])
]]
    it("reads DDPLUA_CONFIG, prints on rank 0 and saves config.yaml in the run directory", function()
      U.write(dir .. "/s.lua", script)
      U.write(dir .. "/run.yaml", "epochs: 8\nmodel:\n  hidden: 32\nddplua:\n  nproc: 4\n")
      local ok, out = U.run_ddplua(dir .. "/s.lua", { "lr=0.5", "pos" }, { DDPLUA_CONFIG = dir .. "/run.yaml" }, dir)
      assert.is_true(ok, out)
      assert.matches("RESULT\t8\t0.5\t32\truns/cfgtest\t1\tpos", out, 1, true)
      assert.matches("config (defaults < " .. dir .. "/run.yaml < command line):", out, 1, true)
      assert.matches("\n  epochs: 8\n", out, 1, true)
      local saved = core.yaml_load(dir .. "/runs/cfgtest/config.yaml")
      assert.are.same({ epochs = 8, lr = 0.5, model = { hidden = 32 }, run_name = "cfgtest" }, saved)
    end)

    it("prints and writes nothing on other ranks", function()
      U.write(dir .. "/s.lua", script)
      local ok, out = U.run_ddplua(dir .. "/s.lua", { "epochs=2" }, { RANK = "1", WORLD_SIZE = "2" }, dir)
      assert.is_true(ok, out)
      assert.are.equal("RESULT\t2\t0.05\t128\truns/cfgtest\t0\tnil\n", out)
      assert.is_false(U.exists(dir .. "/runs"))
    end)

    it("prefers an explicit --config in the arguments to DDPLUA_CONFIG", function()
      U.write(dir .. "/s.lua", script)
      U.write(dir .. "/env.yaml", "epochs: 1\n")
      U.write(dir .. "/arg.yaml", "epochs: 2\n")
      local env = { DDPLUA_CONFIG = dir .. "/env.yaml" }
      local ok, out = U.run_ddplua(dir .. "/s.lua", { "--config", "arg.yaml" }, env, dir)
      assert.is_true(ok, out)
      assert.matches("RESULT\t2\t", out, 1, true)
    end)
  end)
end)
