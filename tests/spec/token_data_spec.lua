-- Language-model data (issue 14): data.TokenFile reads nanoGPT's flat
-- token files (written here by numpy, as nanoGPT's prepare.py does) by
-- memory map, as 1-based windows with next-token targets, random per
-- generator or as a dataset; TokenFile.write writes numpy's bytes.
-- data.ByteTokenizer and data.CharTokenizer (nanoGPT's sorted(set(text))
-- vocabulary, checked against Python) encode and decode, save and load.
local ddp = require "ddplua"
local data = ddp.data
local U = require "helpers.io_util"

local function fails(pattern, f, ...)
  local ok, err = pcall(f, ...)
  assert.is_false(ok, "expected an error matching " .. pattern)
  assert.matches(pattern, tostring(err))
end

local function list(n, f)
  local out = {}
  for i = 1, n do out[i] = f(i) end
  return out
end

describe("data.TokenFile", function()
  local dir
  before_each(function() dir = U.tmpdir() end)
  after_each(function() U.rm_rf(dir) end)

  -- file ids 0-based: id(i) for the i-th token
  local function id(i) return (i * 7919) % 50257 end

  it("reads numpy's uint16 file as 1-based windows with next-token targets", function()
    local path = dir .. "/train.bin"
    if U.have_torch() then -- torch brings numpy
      local ok, out = U.run(U.python .. " -c " .. U.quote("import numpy as np; np.array([(i * 7919) % 50257 for i in " ..
        "range(1, 1001)], dtype=np.uint16).tofile('" .. path .. "')"))
      assert.is_true(ok, out)
      local mine = dir .. "/mine.bin"
      data.TokenFile.write(mine, list(1000, function(i) return id(i) + 1 end))
      assert.are.equal(U.read(path), U.read(mine), "TokenFile.write differs from numpy's tofile")
    else
      data.TokenFile.write(path, list(1000, function(i) return id(i) + 1 end))
    end
    local tf = data.TokenFile { path = path, block_size = 8 }
    assert.are.equal(1000, tf:num_tokens())
    assert.are.equal(992, #tf)
    local x, y = tf:get(5)
    assert.are.same(list(8, function(t) return id(4 + t) + 1 end), x:totable())
    assert.are.same(list(8, function(t) return id(5 + t) + 1 end), y:totable())
    local xb, yb = tf:get_batch({ 1, 992 })
    assert.are.same({ 2, 8 }, xb:size())
    assert.are.same(list(8, function(t) return id(992 + t) + 1 end), yb[2]:totable()) -- the last target is token 1000
    assert.are.equal("int64", xb:dtype())
  end)

  it("samples random windows from its generator, reproducibly, and resumes from its state", function()
    local path = dir .. "/t.bin"
    data.TokenFile.write(path, list(500, function(i) return i % 200 + 1 end), { dtype = "uint8" })
    local a = data.TokenFile { path = path, dtype = "uint8", block_size = 16, seed = 5 }
    local b = data.TokenFile { path = path, dtype = "uint8", block_size = 16, generator = ddp.Generator(5) }
    local x, y = a:sample(32)
    assert.are.same({ 32, 16 }, x:size())
    assert.are.same(x:totable(), b:sample(32):totable()) -- seed = 5 + rank 0
    assert.are.same(x:narrow(2, 2, 15):totable(), y:narrow(2, 1, 15):totable()) -- y is x one token later
    for _, row in ipairs(x:totable()) do
      for t = 2, 16 do assert.are.equal(row[t - 1] % 200 + 1, row[t]) end -- windows of the file
    end
    local sd = a:state_dict()
    local next1 = a:sample(4):totable()
    local c = data.TokenFile { path = path, dtype = "uint8", block_size = 16, seed = 99 }
    c:load_state_dict(sd)
    assert.are.same(next1, c:sample(4):totable())
    assert.are_not.same(x:totable(), data.TokenFile { path = path, dtype = "uint8", block_size = 16, seed = 6 }
      :sample(32):totable())
    -- the global generator when neither is given
    local g = data.TokenFile { path = path, dtype = "uint8", block_size = 16 }
    ddp.manual_seed(1)
    local s1 = g:sample(8):totable()
    ddp.manual_seed(1)
    assert.are.same(s1, g:sample(8):totable())
  end)

  it("is a dataset: a DataLoader with a DistributedSampler covers every window once", function()
    local path = dir .. "/t.bin"
    data.TokenFile.write(path, list(40, function(i) return i end))
    local tf = data.TokenFile { path = path, block_size = 4 }
    local starts = {}
    for r = 0, 1 do
      local sampler = data.DistributedSampler(tf, { num_replicas = 2, rank = r, shuffle = false })
      for x, y in data.DataLoader(tf, { batch_size = 5, sampler = sampler }):iter() do
        for _, row in ipairs(x:totable()) do starts[#starts + 1] = row[1] end
        assert.are.same((x + 1):totable(), y:totable())
      end
    end
    table.sort(starts)
    assert.are.same(list(36, function(i) return i end), starts)
  end)

  it("names bad files and arguments", function()
    local path = dir .. "/t.bin"
    data.TokenFile.write(path, { 1, 2, 3, 4, 5 })
    U.write(dir .. "/odd.bin", "abc")
    U.write(dir .. "/empty.bin", "")
    fails("TokenFile: .*missing.bin: cannot open", data.TokenFile, { path = dir .. "/missing.bin", block_size = 2 })
    fails("TokenFile: .*odd.bin: 3 bytes is not a whole number of tokens %(a token file of uint16 holds 2",
      data.TokenFile, { path = dir .. "/odd.bin", block_size = 1 })
    fails("TokenFile: .*empty.bin: 0 bytes is empty", data.TokenFile, { path = dir .. "/empty.bin", block_size = 1 })
    fails("TokenFile: .*t.bin holds 5 tokens; a window of block_size 5 and its next%-token targets need 6",
      data.TokenFile, { path = path, block_size = 5 })
    fails('TokenFile: dtype must be "uint16" or "uint8", got int32', data.TokenFile,
      { path = path, block_size = 2, dtype = "int32" })
    fails("TokenFile: block_size must be a positive integer, got 0", data.TokenFile, { path = path, block_size = 0 })
    fails("TokenFile: unknown option 'blocksize'", data.TokenFile, { path = path, blocksize = 2 })
    fails("TokenFile: give generator= or seed=, not both", data.TokenFile,
      { path = path, block_size = 2, seed = 1, generator = ddp.Generator(1) })
    local tf = data.TokenFile { path = path, block_size = 2 }
    fails("TokenFile: index 4 out of range %(positions are 1%.%.3%)", function() tf:get(4) end)
    fails("TokenFile: window start 4 %(batch position 2%) is out of range: the file has 5 tokens, so starts are " ..
      "1%.%.3 for block_size 2", function() tf:get_batch({ 1, 4 }) end)
    fails("TokenFile:sample: batch_size must be a positive integer, got 0", function() tf:sample(0) end)
    fails("TokenFile.write: id 70000 at position 2 does not fit a uint16 token file %(ids 1%.%.65536%)",
      data.TokenFile.write, dir .. "/w.bin", { 1, 70000 })
    fails("TokenFile.write: id 0 at position 1 does not fit a uint8 token file", data.TokenFile.write,
      dir .. "/w.bin", { 0 }, { dtype = "uint8" })
    assert.is_false(U.exists(dir .. "/w.bin"), "a failed write left a file")
  end)
end)

describe("tokenizers", function()
  it("ByteTokenizer: any bytes round-trip as ids 1..256", function()
    local tok = data.ByteTokenizer()
    assert.are.equal(256, tok.vocab_size)
    local text = "h\0i \255 \xc3\xa9"
    local ids = tok:encode(text)
    assert.are.same({ 105, 1, 106, 33, 256, 33, 196, 170 }, ids:totable())
    assert.are.equal(text, tok:decode(ids))
    assert.are.equal(text, tok:decode(ids:totable()))
    assert.are.equal(text, tok:decode(ids:view(2, 4)))
    assert.are.equal("", tok:decode(tok:encode("")))
    fails("ByteTokenizer:decode: id 257 at position 2 is outside 1%.%.256", function() tok:decode({ 5, 257 }) end)
    fails("ByteTokenizer:decode: ids must be int64, got float32", function() tok:decode(ddp.ones(2)) end)
    fails("ByteTokenizer:encode: expected a string, got number", function() tok:encode(5) end)
  end)

  it("CharTokenizer: Python's sorted(set(text)) vocabulary, round-trips, saves and loads", function()
    local text = "To be, or not to be: que sera, sera. Caf\xc3\xa9 \xc3\xbcber \xe2\x82\xac 5!\n"
    local tok = data.CharTokenizer(text)
    if U.have_torch() then
      local ok, out = U.run(U.python .. " -c " .. U.quote("import json, sys; print(json.dumps(sorted(set(sys.argv[1]))))") ..
        " " .. U.quote(text))
      assert.is_true(ok, out)
      assert.are.same(ddp.core.json_decode(out), tok.chars)
    end
    assert.are.equal(#tok.chars, tok.vocab_size)
    assert.are.equal(1, tok.stoi["\n"]) -- the smallest code point first
    local ids = tok:encode(text)
    assert.are.equal(utf8.len(text), ids:numel())
    assert.are.equal(text, tok:decode(ids))
    fails('CharTokenizer:encode: character "z" at position 3 is not in the vocabulary', function() tok:encode("Toz") end)
    fails("CharTokenizer:decode: id 99 at position 1 is outside 1%.%.%d+", function() tok:decode({ 99 }) end)
    local dir = U.tmpdir()
    tok:save(dir .. "/vocab.json")
    local back = data.CharTokenizer.load(dir .. "/vocab.json")
    assert.are.same(tok.chars, back.chars)
    assert.are.same(ids:totable(), back:encode(text):totable())
    U.write(dir .. "/bad.json", '{"chars": ["a"]}')
    fails("CharTokenizer.load: .*bad.json is not a saved CharTokenizer", data.CharTokenizer.load, dir .. "/bad.json")
    U.rm_rf(dir)
    fails("CharTokenizer: the text is not valid UTF%-8", data.CharTokenizer, "ab\255")
    fails("CharTokenizer: the text is empty", data.CharTokenizer, "")
  end)

  it("CharTokenizer: an ASCII vocabulary encodes through C to the same ids as the code-point path", function()
    local text = string.rep("hello world, the quick brown fox. ", 50)
    local tok = data.CharTokenizer(text)
    assert.is_not_nil(tok._lut, "an ASCII vocabulary takes the C path")
    local fast = tok:encode(text):totable()
    local slow = {}
    for _, cp in utf8.codes(text) do slow[#slow + 1] = tok.stoi[utf8.char(cp)] end
    assert.are.same(slow, fast)
    assert.are.equal(text, tok:decode(tok:encode(text)))
    fails('CharTokenizer:encode: character "Q" at position 2 is not in the vocabulary', function() tok:encode("hQ") end)
  end)
end)
