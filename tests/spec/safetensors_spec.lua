-- ddp.save / ddp.load (safetensors): round trips of every dtype bit for bit,
-- ordering, metadata, atomic replacement, rejection of malformed files with
-- the file and byte offset named, and interop with PyTorch both ways.
local ddp = require "ddplua"
local core = require "ddplua.core"
local U = require "helpers.io_util"

local ELSIZE = { float32 = 4, float64 = 8, int64 = 8, uint8 = 1, bfloat16 = 2, float16 = 2 }
local ST_NAME = { float32 = "F32", float64 = "F64", int64 = "I64", uint8 = "U8", bfloat16 = "BF16", float16 = "F16" }

-- Deterministic pseudo-random bytes (not the generator under test).
local function random_bytes(n, seed)
  local x, out = seed, {}
  for i = 1, n do
    x = (x * 1103515245 + 12345) % 2147483648
    out[i] = string.char((x >> 16) & 255)
  end
  return table.concat(out)
end

-- A raw safetensors file: 8-byte size, header text, data.
local function raw_file(header, data, size_override)
  return string.pack("<I8", size_override or #header) .. header .. (data or "")
end

local function header_of(path)
  local s = U.read(path)
  local n = string.unpack("<I8", s)
  return n, s:sub(9, 8 + n), s
end

local function load_error(path)
  local ok, err = pcall(ddp.load, path)
  assert.is_false(ok, "expected " .. path .. " to be rejected")
  return err
end

describe("safetensors", function()
  local dir
  before_each(function() dir = U.tmpdir() end)
  after_each(function() U.rm_rf(dir) end)

  it("round-trips every dtype bit for bit, including NaN payloads, infinities, subnormals and -0", function()
    local specials = {
      float32 = string.pack("<I4I4I4I4I4I4", 0x7fc00001, 0xff800000, 0x00000001, 0x80000000, 0x7f7fffff, 0x3f800000),
      float64 = string.pack("<I8I8I8", 0x7ff8000000000001, 0x0000000000000001, 0x8000000000000000),
      bfloat16 = string.pack("<I2I2I2I2I2", 0x7fc1, 0x7f80, 0x0001, 0x8000, 0xff81),
      float16 = string.pack("<I2I2I2I2I2", 0x7e01, 0x7c00, 0x0001, 0x8000, 0xfc00),
      int64 = string.pack("<i8i8i8", math.mininteger, math.maxinteger, -1),
      uint8 = string.pack("BBB", 0, 255, 128),
    }
    local originals, tensors, seed = {}, {}, 1
    for dtype, es in pairs(ELSIZE) do
      local bytes = specials[dtype] .. random_bytes(es * 24, seed)
      seed = seed + 1
      local n = #bytes // es
      tensors["t_" .. dtype] = core.frombuffer(bytes, { dtype = dtype, shape = { n } })
      originals["t_" .. dtype] = bytes
    end
    local path = dir .. "/all.safetensors"
    ddp.save(tensors, path)
    local back = ddp.load(path)
    for name, bytes in pairs(originals) do
      assert.is_true(core.is_tensor(back[name]), name)
      assert.are.equal(tensors[name]:dtype(), back[name]:dtype())
      assert.are.equal(U.hex(bytes), U.hex(core.tobytes(back[name])), name)
    end
  end)

  it("keeps shapes: 0-d, empty, 8-d, and writes non-contiguous tensors in logical order", function()
    local x = ddp.randn(3, 4, { dtype = "float64" })
    local t = {
      scalar = ddp.tensor(3.5),
      empty = ddp.zeros(0, 5),
      eight = ddp.ones(1, 2, 1, 2, 1, 2, 1, 2),
      transposed = x:transpose(1, 2),
      narrowed = x:narrow(2, 2, 2),
    }
    local path = dir .. "/shapes.safetensors"
    ddp.save(t, path)
    local back = ddp.load(path)
    assert.are.same({}, back.scalar:size())
    assert.are.equal(3.5, back.scalar:item())
    assert.are.same({ 0, 5 }, back.empty:size())
    assert.are.same({ 1, 2, 1, 2, 1, 2, 1, 2 }, back.eight:size())
    assert.are.same(x:transpose(1, 2):totable(), back.transposed:totable())
    assert.are.same(x:narrow(2, 2, 2):totable(), back.narrowed:totable())
  end)

  it("sorts a plain table by name, keeps the order of a pairs array and of an ordered table", function()
    local a, b, c = ddp.ones(1), ddp.ones(2), ddp.ones(3)
    local p1 = dir .. "/sorted.safetensors"
    ddp.save({ zeta = a, alpha = b, mid = c }, p1)
    local _, _, names = ddp.load(p1)
    assert.are.same({ "alpha", "mid", "zeta" }, names)

    local p2 = dir .. "/pairs.safetensors"
    ddp.save({ { "zeta", a }, { "alpha", b }, { "mid", c } }, p2)
    _, _, names = ddp.load(p2)
    assert.are.same({ "zeta", "alpha", "mid" }, names)

    local order = { "mid", "zeta", "alpha" }
    local ordered = setmetatable({ mid = c, zeta = a, alpha = b }, {
      __pairs = function(t)
        local i = 0
        return function()
          i = i + 1
          if order[i] then return order[i], rawget(t, order[i]) end
        end, t, nil
      end,
    })
    local p3 = dir .. "/ordered.safetensors"
    ddp.save(ordered, p3)
    _, _, names = ddp.load(p3)
    assert.are.same(order, names)
    -- same input, same bytes
    ddp.save({ zeta = a, alpha = b, mid = c }, dir .. "/again.safetensors")
    assert.are.equal(U.read(p1), U.read(dir .. "/again.safetensors"))
  end)

  it("pads the header to 8 bytes and aligns every tensor's data to its element size", function()
    local t = { u = ddp.zeros(3, { dtype = "uint8" }), h = ddp.zeros(3, { dtype = "float16" }),
      d = ddp.zeros(3, { dtype = "float64" }), f = ddp.zeros(1, { dtype = "float32" }) }
    local path = dir .. "/aligned.safetensors"
    ddp.save(t, path)
    local n, header, all = header_of(path)
    assert.are.equal(0, n % 8)
    local h = core.json_decode(header)
    local total = 0
    for name, e in pairs(h) do
      if name ~= "__metadata__" then
        local es = ELSIZE[t[name]:dtype()]
        assert.are.equal(0, e.data_offsets[1] % es, name)
        total = total + (e.data_offsets[2] - e.data_offsets[1])
      end
    end
    assert.are.equal(#all - 8 - n, total)
  end)

  it("round-trips metadata (strings; numbers are written as text) and state dicts with the module. prefix", function()
    local sd = { ["module.fc.weight"] = ddp.randn(4, 3), ["module.fc.bias"] = ddp.randn(4) }
    local path = dir .. "/meta.safetensors"
    ddp.save(sd, path, { metadata = { epoch = 3, note = "quotes \" and\nnewlines, ünïcødé", empty = "" } })
    local back, meta = ddp.load(path)
    assert.are.same({ epoch = "3", note = "quotes \" and\nnewlines, ünïcødé", empty = "" }, meta)
    assert.are.same(sd["module.fc.weight"]:totable(), back["module.fc.weight"]:totable())
    assert.are.same(sd["module.fc.bias"]:totable(), back["module.fc.bias"]:totable())
    ddp.save({}, dir .. "/none.safetensors")
    local none, m2 = ddp.load(dir .. "/none.safetensors")
    assert.are.same({}, none)
    assert.are.same({}, m2)
  end)

  it("replaces the target atomically and leaves no temporary file behind", function()
    local path = dir .. "/model.safetensors"
    ddp.save({ w = ddp.full({ 4 }, 1) }, path)
    ddp.save({ w = ddp.full({ 4 }, 2) }, path)
    assert.are.same({ 2, 2, 2, 2 }, ddp.load(path).w:totable())
    local ok, listing = U.run("ls -A " .. U.quote(dir))
    assert.is_true(ok)
    assert.are.equal("model.safetensors\n", listing)
    -- a save that cannot complete (the target is a non-empty directory) keeps nothing
    core.mkdir(dir .. "/occupied/sub")
    local ok2, err = pcall(ddp.save, { w = ddp.ones(2) }, dir .. "/occupied")
    assert.is_false(ok2)
    assert.matches("occupied", err)
    local _, listing2 = U.run("ls -A " .. U.quote(dir))
    assert.are.equal("model.safetensors\noccupied\n", listing2)
  end)

  it("maps the file: loaded tensors are private copies-on-write that survive the file being replaced", function()
    local path = dir .. "/mapped.safetensors"
    ddp.save({ w = ddp.arange(0, 6):to("float32"), d = ddp.tensor({ 1.5, 2.5 }, { dtype = "float64" }) }, path)
    local mapped = ddp.load(path, { mmap = true })
    local read = ddp.load(path)
    assert.are.same(read.w:totable(), mapped.w:totable())
    assert.are.same(read.d:totable(), mapped.d:totable())
    mapped.w:fill_(7)
    assert.are.same({ 0, 1, 2, 3, 4, 5 }, ddp.load(path).w:totable())
    ddp.save({ w = ddp.zeros(6) }, path) -- replaced by rename while `read` and `mapped` live
    assert.are.same({ 7, 7, 7, 7, 7, 7 }, mapped.w:totable())
    assert.are.same({ 1.5, 2.5 }, mapped.d:totable())
    assert.are.same({ 0, 0, 0, 0, 0, 0 }, ddp.load(path).w:totable())
  end)

  it("rejects bad arguments with errors that name them", function()
    local p = dir .. "/x.safetensors"
    local cases = {
      { function() ddp.save({ w = 3 }, p) end, "value of 'w' is a number, expected a tensor" },
      { function() ddp.save({ [1] = ddp.ones(1), [2] = 5 }, p) end, "tensor names must be strings" },
      { function() ddp.save({ __metadata__ = ddp.ones(1) }, p) end, "reserved" },
      { function() ddp.save({ { "a", ddp.ones(1) }, { "a", ddp.ones(2) } }, p) end, "tensor name 'a' is given twice" },
      { function() ddp.save({ w = ddp.ones(1) }, p, { metadata = { k = {} } }) end, "metadata 'k' is a table" },
      { function() ddp.save({ w = ddp.ones(1) }, p, { meta = {} }) end, "unknown option 'meta'" },
      { function() ddp.save({ ["bad\xff"] = ddp.ones(1) }, p) end, "is not valid UTF-8" },
      { function() ddp.save({ w = ddp.ones(1) }, p, { metadata = { k = "\xfe" } }) end,
        "metadata 'k' is not valid UTF-8" },
      { function() ddp.save({ w = ddp.ones(1) }, dir .. "/no/such/dir/x.safetensors") end,
        "no/such/dir/x.safetensors" },
      { function() ddp.load(p, { device = "tpu" }) end, "unknown device 'tpu'" },
    }
    for _, c in ipairs(cases) do
      local ok, err = pcall(c[1])
      assert.is_false(ok)
      assert.matches(c[2], err, 1, true)
    end
    assert.is_false(U.exists(p))
  end)

  describe("malformed files", function()
    local good_header = '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},' ..
      '"b":{"dtype":"U8","shape":[3],"data_offsets":[8,11]}}'
    local good_data = string.rep("\1", 11)

    local function check(name, bytes, pattern)
      local path = dir .. "/" .. name .. ".safetensors"
      U.write(path, bytes)
      local err = load_error(path)
      assert.matches(path, err, 1, true)
      assert.matches(pattern, err)
      return err
    end

    it("accepts the well-formed reference file these cases corrupt", function()
      local path = dir .. "/good.safetensors"
      U.write(path, raw_file(good_header, good_data))
      local t = ddp.load(path)
      assert.are.same({ 1, 1, 1 }, t.b:totable())
    end)

    it("rejects truncated files at every kind of boundary", function()
      local full = raw_file(good_header, good_data)
      check("empty", "", "too short for the 8%-byte header size")
      check("size_cut", full:sub(1, 5), "too short")
      check("header_cut", full:sub(1, 8 + 20), "header size %d+ exceeds the %d+ bytes that follow")
      local err = check("data_cut", full:sub(1, #full - 2), "run past the 9%-byte data buffer")
      assert.matches("tensor 'b'", err)
    end)

    it("rejects a huge header size without allocating it", function()
      check("huge", string.pack("<I8", 0xffffffffffff) .. "{}", "header size 281474976710655 exceeds")
      -- a sparse file big enough that only the limit stops the header read
      local path = dir .. "/over_limit.safetensors"
      local f = assert(io.open(path, "wb"))
      f:write(string.pack("<I8", 100000008))
      f:seek("set", 100000015)
      f:write(" ")
      f:close()
      local err = load_error(path)
      assert.matches(path, err, 1, true)
      assert.matches("header size 100000008 exceeds the limit of 100000000 bytes", err)
    end)

    it("rejects bad JSON with the byte offset", function()
      check("trailing_comma", raw_file('{"a":1,}', ""), "invalid JSON at byte 15: trailing comma")
      check("garbage", raw_file('{"a" 1}', ""), "invalid JSON at byte 13: expected ':'")
      check("not_object", raw_file('[1, 2]', ""), "at byte 8: the header is an array")
      check("dup", raw_file('{"a":{},"a":{}}', ""), 'duplicate key "a"')
      check("control", raw_file('{"a\1":{}}', ""), "unescaped control character")
    end)

    it("rejects bad tensor entries, naming the tensor", function()
      local function one(entry, data) return raw_file('{"t":' .. entry .. '}', data or "") end
      check("dtype", one('{"dtype":"I32","shape":[1],"data_offsets":[0,4]}', "xxxx"), "tensor 't' has dtype \"I32\"")
      check("dtype_type", one('{"dtype":5,"shape":[1],"data_offsets":[0,4]}', "xxxx"), "dtype is an integer")
      check("no_shape", one('{"dtype":"F32","data_offsets":[0,4]}', "xxxx"), "tensor 't' lacks \"shape\"")
      check("neg_shape", one('{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}', "xxxx"), "shape entry 1 is not")
      check("extra_field", one('{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}', "xxxx"), 'unknown field "x"')
      check("offsets", one('{"dtype":"F32","shape":[1],"data_offsets":[0]}', "xxxx"), "data_offsets must be two")
      check("backwards", one('{"dtype":"F32","shape":[1],"data_offsets":[4,0]}', "xxxx"), "end before they begin")
      check("mismatch", one('{"dtype":"F32","shape":[2],"data_offsets":[0,4]}', "xxxx"), "hold 4 bytes, but F32 x 2")
      check("entry_type", one('[1]', ""), "tensor 't' is described by an array")
      check("meta_value", raw_file('{"__metadata__":{"k":1}}', ""), "__metadata__ value of \"k\" is an integer")
    end)

    it("rejects overlapping offsets, holes and trailing bytes", function()
      check("overlap", raw_file('{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},' ..
        '"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}', "123456"),
        "tensor 'b' %[2, 6%] overlaps tensor 'a' %[0, 4%]")
      check("hole", raw_file('{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},' ..
        '"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}}', "123456"), "bytes %[2, 4%) of the data buffer")
      check("trailing", raw_file(good_header, good_data .. "zz"), "2 bytes after the last tensor")
      check("out_of_bounds", raw_file('{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}', "1234"), "run past")
    end)

    it("names a missing file and a directory", function()
      local err = load_error(dir .. "/missing.safetensors")
      assert.matches("missing.safetensors: cannot open", err, 1, true)
      err = load_error(dir)
      assert.matches("not a regular file", err)
    end)
  end)

  describe("PyTorch interop", function()
    -- One Python process (importing torch takes seconds) reads the file
    -- ddplua wrote and writes one for ddplua to read.
    local script = [==[
import json, struct, sys, torch
types = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "U8": torch.uint8,
         "BF16": torch.bfloat16, "F16": torch.float16}
names = {v: k for k, v in types.items()}
def values(t):
    return t.double().flatten().tolist() if t.is_floating_point() else t.flatten().tolist()

# 1. read ddplua's file with plain struct/json and torch.frombuffer
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
assert n % 8 == 0, "header not padded"
read = {"__metadata__": header.get("__metadata__", {})}
for name, e in header.items():
    if name == "__metadata__":
        continue
    b, end = e["data_offsets"]
    buf = bytearray(data[8 + n + b:8 + n + end])
    t = torch.frombuffer(buf, dtype=types[e["dtype"]]) if buf else torch.empty(0, dtype=types[e["dtype"]])
    t = t.reshape(e["shape"])
    read[name] = {"dtype": e["dtype"], "shape": list(t.shape), "values": values(t)}

# 2. write a file from torch tensors' bytes, in an order ddplua does not write, header unpadded
torch.manual_seed(0)
tensors = {
    "w32": torch.randn(3, 4),
    "w64": torch.randn(5, dtype=torch.float64),
    "idx": torch.tensor([[-3, 0, 2**40]], dtype=torch.int64),
    "img": torch.arange(0, 250, 10).to(torch.uint8).reshape(5, 5),
    "bf": torch.tensor([1.5, -2.25, 3e38, 1e-40], dtype=torch.bfloat16),
    "hf": torch.tensor([0.1, -65504, 6e-8, 1.0], dtype=torch.float16),
    "scalar": torch.tensor(7.0),
}
def raw(t):
    t = t.contiguous()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.view(torch.int16)
    return t.numpy().tobytes()
header, blobs, off = {"__metadata__": {"source": "torch " + torch.__version__}}, [], 0
for name in reversed(sorted(tensors)):
    b = raw(tensors[name]); blobs.append(b)
    header[name] = {"dtype": names[tensors[name].dtype], "shape": list(tensors[name].shape),
                    "data_offsets": [off, off + len(b)]}
    off += len(b)
text = json.dumps(header).encode()
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack("<Q", len(text))); f.write(text); f.write(b"".join(blobs))
written = {k: {"shape": list(t.shape), "values": values(t)} for k, t in tensors.items()}
print(json.dumps({"read": read, "written": written}))
]==]

    local pydir, saved, result, skip
    setup(function()
      pydir = U.tmpdir()
      ddp.manual_seed(5)
      saved = {
        ["module.fc.weight"] = ddp.randn(4, 3),
        ["module.fc.bias"] = ddp.randn(4, { dtype = "float64" }),
        labels = ddp.tensor({ { 1, -7 }, { math.maxinteger, 0 } }),
        pixels = ddp.arange(0, 200, 7):to("uint8"),
        half = ddp.tensor({ 0.5, -1.75, 1000, 0.0001 }):to("float16"),
        brain = ddp.tensor({ 0.5, -1.75, 1e30, 3.0 }):to("bfloat16"),
        empty = ddp.zeros(0, 3),
        scalar = ddp.tensor(2.5),
      }
      ddp.save(saved, pydir .. "/to_torch.safetensors", { metadata = { epoch = "3" } })
      local files = { pydir .. "/to_torch.safetensors", pydir .. "/from_torch.safetensors" }
      local ok, out = U.run_python(pydir, script, files)
      if not ok and out:match("No module named 'torch'") then
        skip = "/usr/bin/python3 cannot import torch: the PyTorch interop checks did not run"
      else
        assert(ok, out)
        result = core.json_decode(out)
      end
    end)
    teardown(function() U.rm_rf(pydir) end)

    it("writes files that PyTorch reads with plain struct/json and torch.frombuffer", function()
      if skip then return pending(skip) end
      local py = result.read
      assert.are.same({ epoch = "3" }, py.__metadata__)
      for name, x in pairs(saved) do
        assert.are.equal(ST_NAME[x:dtype()], py[name].dtype, name)
        assert.are.same(x:size(), py[name].shape, name)
        local mine = x:dim() == 0 and { x:item() } or U.flat(x:totable())
        assert.are.same(mine, py[name].values, name)
      end
    end)

    it("reads files written by Python (plain struct/json, torch tensors' bytes)", function()
      if skip then return pending(skip) end
      local t, meta = ddp.load(pydir .. "/from_torch.safetensors")
      assert.matches("^torch ", meta.source)
      -- the values hold a denormal: read them without denormals-are-zero
      -- (on by default, it reads a denormal float as 0, as PyTorch does under
      -- torch.set_flush_denormal(True))
      ddp.set_flush_denormal(false)
      for name, e in pairs(result.written) do
        assert.is_true(core.is_tensor(t[name]), name)
        assert.are.same(e.shape, t[name]:size(), name)
        local mine = t[name]:dim() == 0 and { t[name]:item() } or U.flat(t[name]:totable())
        assert.are.same(e.values, mine, name)
      end
      ddp.set_flush_denormal(true)
      assert.are.equal("bfloat16", t.bf:dtype())
      assert.are.equal("float16", t.hf:dtype())
      assert.are.equal("int64", t.idx:dtype())
    end)
  end)
end)
