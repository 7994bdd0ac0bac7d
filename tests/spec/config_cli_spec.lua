-- ddp.config's command line as PyTorch users write it (issue 14):
-- `--key value`, `--key=value` and `key=value` all set a key (they were
-- silently left in `arg` before, the run keeping its default); argparse's
-- `--batch-size` and boolean `--flag` forms; an unknown `--flag` is an
-- error listing the keys; `--help` prints every key with its type, default,
-- value and where the value came from (the YAML file, the command line),
-- and exits 0, once per job.
local ddp = require "ddplua"
local U = require "helpers.io_util"

local function defaults()
  return { epochs = 5, lr = 0.05, batch_size = 64, amp = false, name = "mlp", model = { hidden = 128, act = "relu" },
    extra = {} }
end

local function resolve(args)
  return ddp.config(defaults(), { arg = args, print = false, save = false }), args
end

local function config_error(args)
  local ok, err = pcall(resolve, args)
  assert.is_false(ok, "expected an error for " .. table.concat(args, " "))
  return err
end

describe("ddp.config's command line", function()
  it("takes --key value, --key=value and key=value alike, later ones winning", function()
    for _, args in ipairs {
      { "--batch_size", "32" }, { "--batch_size=32" }, { "batch_size=32" }, { "--batch-size", "32" },
      { "--batch-size=32" }, { "batch_size=8", "--batch_size", "32" },
    } do
      local shown = table.concat(args, " ")
      local cfg, rest = resolve({ table.unpack(args) })
      assert.are.equal(32, cfg.batch_size, shown)
      assert.are.same({}, rest, shown)
    end
    local cfg, rest = resolve({ "data.csv", "--lr", "0.5", "--model.act", "gelu", "--name=a b", "-v", "--epochs",
      "-3", "--", "--not-a-key" })
    assert.are.equal(0.5, cfg.lr)
    assert.are.equal("gelu", cfg.model.act)
    assert.are.equal("a b", cfg.name)
    assert.are.equal(-3, cfg.epochs)
    assert.are.same({ "data.csv", "-v", "--not-a-key" }, rest) -- positional arguments stay the script's
  end)

  it("reads a boolean key alone as true, or takes true/false after it", function()
    assert.is_true(resolve({ "--amp" }).amp)
    assert.is_true(resolve({ "--amp", "data.csv" }).amp)
    assert.is_false(resolve({ "--amp", "false" }).amp)
    assert.is_true(resolve({ "--amp=true" }).amp)
    assert.is_true(resolve({ "--amp", "--lr", "1" }).amp)
  end)

  it("names an unknown --flag with the valid keys, and a missing or wrong value", function()
    local keys = "valid keys: amp, batch_size, epochs, extra.*, lr, model.act, model.hidden, name"
    assert.matches("config: unknown key 'batchsize' (command line --batchsize 64); " .. keys,
      config_error({ "--batchsize", "64" }), 1, true)
    assert.matches("config: unknown key 'verbose' (command line --verbose); " .. keys, config_error({ "--verbose" }),
      1, true)
    assert.matches("config: --epochs needs a value after it (--epochs value or --epochs=value)",
      config_error({ "--epochs" }), 1, true)
    assert.matches("config: --lr needs a value after it", config_error({ "--lr", "--epochs", "2" }), 1, true)
    assert.matches('config: epochs = "ten" (command line --epochs ten) must be an integer, like its default 5',
      config_error({ "--epochs", "ten" }), 1, true)
    assert.matches("config: malformed key 'a..b' (command line --a..b=1)", config_error({ "--a..b=1" }), 1, true)
  end)

  describe("in a ddplua process", function()
    local dir
    before_each(function() dir = U.tmpdir() end)
    after_each(function() U.rm_rf(dir) end)
    local script = [[
local ddp = require "ddplua"
local cfg = ddp.config({epochs = 5, lr = 0.05, batch_size = 64, model = {hidden = 128}, amp = false})
print("RESULT", cfg.epochs, cfg.lr, cfg.batch_size, cfg.model.hidden, cfg.amp, #arg)
]]

    it("`ddplua train.lua --batch_size 64` sets the key (it was silently ignored)", function()
      U.write(dir .. "/train.lua", script)
      local ok, out = U.run_ddplua(dir .. "/train.lua", { "--batch_size", "16", "--lr=0.5", "epochs=2", "--amp" }, {},
        dir)
      assert.is_true(ok, out)
      assert.matches("RESULT\t2\t0.5\t16\t128\ttrue\t0", out, 1, true)
    end)

    it("--help lists every key with type, default, value and origin, on rank 0 only, and exits 0", function()
      U.write(dir .. "/train.lua", script)
      U.write(dir .. "/run.yaml", "lr: 0.2\nmodel: {hidden: 7}\n")
      local ok, out = U.run(U.quote(U.abspath(U.ddplua)) .. " --nproc 2 --config " .. U.quote(dir .. "/run.yaml") ..
        " " .. U.quote(dir .. "/train.lua") .. " --epochs 3 --help")
      assert.is_true(ok, out)
      assert.is_nil(out:find("RESULT", 1, true), "the script went on after --help")
      assert.matches("usage: ddplua ", out, 1, true)
      assert.matches("YAML: " .. dir .. "/run.yaml", out, 1, true)
      local function row(key, ty, default, value, origin)
        assert.matches("%[rank 0%]   " .. key:gsub("%p", "%%%0") .. " +" .. ty .. " +default " ..
          default:gsub("%p", "%%%0") .. " +value " .. value:gsub("%p", "%%%0") .. " %(" ..
          origin:gsub("%p", "%%%0") .. "%)", out)
      end
      row("amp", "boolean", "false", "false", "default")
      row("batch_size", "integer", "64", "64", "default")
      row("epochs", "integer", "5", "3", "command line --epochs 3")
      row("lr", "float", "0.05", "0.2", dir .. "/run.yaml")
      row("model.hidden", "integer", "128", "7", dir .. "/run.yaml")
      assert.is_nil(out:find("[rank 1]", 1, true), "rank 1 printed the help too")
    end)
  end)
end)
