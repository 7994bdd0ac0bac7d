-- The io bindings under the run helpers: JSON and YAML text <-> Lua values,
-- YAML errors with file:line:column, Lua's math.random state, raw bytes,
-- directories.
local ddp = require "ddplua"
local core = require "ddplua.core"
local U = require "helpers.io_util"

-- Deep equality that also compares number subtypes (1 vs 1.0) and NaN.
local function same_typed(a, b, path)
  path = path or "value"
  if type(a) ~= type(b) then return false, path .. ": " .. type(a) .. " vs " .. type(b) end
  if type(a) == "number" then
    if math.type(a) ~= math.type(b) then return false, path .. ": " .. math.type(a) .. " vs " .. math.type(b) end
    if a ~= b and not (a ~= a and b ~= b) then return false, path .. ": " .. a .. " vs " .. b end
    return true
  end
  if type(a) ~= "table" then return a == b, path end
  for k, v in pairs(a) do
    local ok, where = same_typed(v, b[k], path .. "." .. tostring(k))
    if not ok then return false, where end
  end
  for k in pairs(b) do
    if a[k] == nil then return false, path .. "." .. tostring(k) .. " missing" end
  end
  return true
end

local sample = {
  epochs = 5, lr = 0.05, big = 1e300, tiny = 5e-324, neg_zero = -0.0, whole_float = 3.0,
  name = "mlp", looks_int = "3", looks_bool = "true", looks_null = "null", empty = "", spaces = "  a b ",
  colon = "key: value", hash = "a #comment", quote = "it's \"quoted\"", newline = "line1\nline2",
  unicode = "ünïcødé ✓", flag = false, on = true,
  list = { 256, 128 }, floats = { 0.9, 0.999 }, nested = { { a = 1 }, { b = { "x", "y" } } },
  model = { hidden = 128, act = "relu", inner = { deep = { deeper = 1 } } }, free = {},
  min = math.mininteger, max = math.maxinteger,
}

describe("JSON", function()
  it("round-trips plain values with their number subtypes", function()
    local text = core.json_encode(sample)
    local ok, where = same_typed(sample, core.json_decode(text))
    assert.is_true(ok, where)
  end)

  it("writes non-finite floats as Python does and reads them back", function()
    local text = core.json_encode({ 1 / 0, -1 / 0, 0 / 0 })
    assert.are.equal("[Infinity,-Infinity,NaN]", text)
    local v = core.json_decode(text)
    assert.are.equal(math.huge, v[1])
    assert.are.equal(-math.huge, v[2])
    assert.is_true(v[3] ~= v[3])
  end)

  it("decodes escapes, surrogate pairs and UTF-8", function()
    local v = core.json_decode('["\\u00e9\\ud83d\\ude00\\n\\t\\"\\\\\\/", "plain ✓"]')
    assert.are.equal("é😀\n\t\"\\/", v[1])
    assert.are.equal("plain ✓", v[2])
  end)

  it("rejects malformed text with the byte offset", function()
    local cases = {
      { '{"a":1,}', "at byte 7: trailing comma" },
      { '{"a":1 "b":2}', "at byte 7: expected ',' or '}'" },
      { '{"a":1,"a":2}', 'at byte 11: duplicate key "a"' },
      { "[01]", "at byte 2: expected ',' or ']'" },
      { "[1.]", "at byte 3: expected a digit after '.'" },
      { '"\\x"', "at byte 1: invalid escape" },
      { '"\\udc00"', "at byte 1: unpaired low surrogate" },
      { '"\xff"', "at byte 1: invalid UTF-8" },
      { "9223372036854775808", "at byte 0: integer out of the 64-bit range" },
      { "[1] [2]", "at byte 4: unexpected data after the value" },
      { "", "at byte 0: unexpected end of input" },
      { string.rep("[", 200) .. string.rep("]", 200), "at byte 128: nested too deeply" },
      { "tru", "at byte 0: expected a value" },
    }
    for _, c in ipairs(cases) do
      local ok, err = pcall(core.json_decode, c[1], "in.json")
      assert.is_false(ok, c[1])
      assert.matches("in.json: invalid JSON " .. c[2], err, 1, true)
    end
  end)

  it("refuses values JSON cannot hold, naming their path", function()
    local cases = {
      { { a = { f = print } }, "state.a.f: cannot store a function" },
      { { a = { [1] = 1, x = 2 } }, "state.a: the table mixes string keys and positions" },
      { { a = { [1] = 1, [3] = 3 } }, "state.a: the table has holes" },
      { { a = { [true] = 1 } }, "state.a: key true (a boolean)" },
      { { s = "\xff\xfe" }, "state.s: the string is not valid UTF-8" },
      { { t = ddp.ones(1) }, "state.t: cannot store a " },
    }
    for _, c in ipairs(cases) do
      local ok, err = pcall(core.json_encode, c[1], "state")
      assert.is_false(ok)
      assert.matches(c[2], err, 1, true)
    end
    local cycle = {}
    cycle.self = cycle
    local ok, err = pcall(core.json_encode, cycle, "c")
    assert.is_false(ok)
    assert.matches("nested more than 100 tables deep", err)
  end)
end)

describe("YAML", function()
  it("dumps values that parse back to the same values and types", function()
    local text = core.yaml_dump(sample, "config")
    local ok, where = same_typed(sample, core.yaml_parse(text, "dump"))
    assert.is_true(ok, tostring(where) .. "\n" .. text)
    -- strings that would read back as other types are quoted
    assert.matches('looks_int: "3"', text, 1, true)
    assert.matches('looks_bool: "true"', text, 1, true)
    assert.matches('empty: ""', text, 1, true)
    assert.matches("list: [256, 128]", text, 1, true)
    assert.matches("whole_float: 3.0", text, 1, true)
  end)

  it("writes mapping keys sorted, so the same config gives the same text", function()
    assert.are.equal("a: 1\nb: 2\nc: 3\n", core.yaml_dump({ c = 3, a = 1, b = 2 }))
    assert.are.equal("{}\n", core.yaml_dump({}))
  end)

  it("names file, line and column of a syntax error", function()
    local dir = U.tmpdir()
    U.write(dir .. "/bad.yaml", "epochs: 5\nmodel:\n  hidden: [1, 2\nlr: 0.1\n")
    local ok, err = pcall(core.yaml_load, dir .. "/bad.yaml")
    U.rm_rf(dir)
    assert.is_false(ok)
    assert.matches("bad.yaml:%d+:%d+: ", err)
    local ok2, err2 = pcall(core.yaml_parse, "a: 1\na: 2\n", "dup.yaml")
    assert.is_false(ok2)
    assert.matches("dup.yaml:2:1: duplicate key", err2, 1, true)
  end)

  it("types scalars like YAML 1.2", function()
    assert.are.equal(3, core.yaml_scalar("3"))
    assert.are.equal("integer", math.type(core.yaml_scalar("3")))
    assert.are.equal("float", math.type(core.yaml_scalar("3.0")))
    assert.are.equal(1e-3, core.yaml_scalar("1e-3"))
    assert.are.equal(true, core.yaml_scalar("true"))
    assert.is_nil(core.yaml_scalar("null"))
    assert.are.equal("abc", core.yaml_scalar("abc"))
  end)
end)

describe("Lua's math.random state", function()
  it("is captured and restored exactly", function()
    math.randomseed(1234)
    for _ = 1, 10 do math.random() end
    local state = core.lua_rng_state()
    assert.are.equal(4, #state)
    local first = {}
    for i = 1, 20 do first[i] = math.random(1, 1000000) end
    core.set_lua_rng_state(state)
    local again = {}
    for i = 1, 20 do again[i] = math.random(1, 1000000) end
    assert.are.same(first, again)
  end)

  it("rejects malformed states", function()
    local ok, err = pcall(core.set_lua_rng_state, { 1, 2, "x", 4 })
    assert.is_false(ok)
    assert.matches("entry 3 is a string", err)
    ok, err = pcall(core.set_lua_rng_state, { 0, 0, 0, 0 })
    assert.is_false(ok)
    assert.matches("all%-zero", err)
  end)
end)

describe("raw bytes and files", function()
  it("frombuffer / tobytes round-trip and check sizes", function()
    local bytes = string.pack("<ffff", 1.5, -2, 0.25, 8)
    local t = core.frombuffer(bytes, { dtype = "float32", shape = { 2, 2 } })
    assert.are.same({ { 1.5, -2 }, { 0.25, 8 } }, t:totable())
    assert.are.equal(bytes, core.tobytes(t))
    assert.are.equal(string.pack("<ff", 1.5, 0.25), core.tobytes(t:transpose(1, 2):narrow(1, 1, 1)))
    local ok, err = pcall(core.frombuffer, "abc", { dtype = "float32" })
    assert.is_false(ok)
    assert.matches("3 bytes are not a whole number of float32 elements", err)
    ok, err = pcall(core.frombuffer, bytes, { dtype = "float64", shape = { 3 } })
    assert.is_false(ok)
    assert.matches("shape %[3%] of float64 needs 24 bytes, got 16", err)
  end)

  it("mkdir creates parents, file_type tells files from directories", function()
    local dir = U.tmpdir()
    core.mkdir(dir .. "/a/b/c")
    assert.are.equal("directory", core.file_type(dir .. "/a/b/c"))
    core.mkdir(dir .. "/a/b/c") -- exists: fine
    U.write(dir .. "/f", "x")
    assert.are.equal("file", core.file_type(dir .. "/f"))
    assert.is_nil(core.file_type(dir .. "/none"))
    local ok, err = pcall(core.mkdir, dir .. "/f/sub")
    U.rm_rf(dir)
    assert.is_false(ok)
    assert.matches("/f/sub", err)
  end)

  it("isatty says no for a pipe", function()
    assert.is_false(core.isatty(99))
    local ok, out = U.run(U.ddplua .. " /dev/stdin <<'EOF' | cat\nprint(require('ddplua.core').isatty(1))\nEOF")
    assert.is_true(ok, out)
    assert.are.equal("false\n", out)
  end)
end)
