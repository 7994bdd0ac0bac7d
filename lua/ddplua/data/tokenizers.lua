-- Text tokenizers for language models; ids are 1-based (nn.Embedding's).
--
-- data.ByteTokenizer(): every byte is a token, id = byte + 1, vocab_size
-- 256 (any text, UTF-8 or not, round-trips).
-- data.CharTokenizer(text): nanoGPT's shakespeare_char vocabulary: the
-- distinct characters (UTF-8 code points) of text, sorted by code point
-- (Python's sorted(set(text))), id = position + 1. tok.chars lists them,
-- tok.stoi[c] / tok.itos[i] map both ways; tok:save(path) writes the
-- vocabulary as JSON and data.CharTokenizer.load(path) reads it back.
--
-- Both: tok:encode(text) -> int64 tensor [n], tok:decode(ids) -> string
-- (ids: a tensor of any shape, read in order, or a Lua list),
-- tok.vocab_size. Encoding a character the vocabulary lacks, or decoding
-- an id outside 1..vocab_size, is an error naming it and its position.
-- Byte-level work (ByteTokenizer; CharTokenizer with an ASCII vocabulary)
-- is done on tensors in C, not per character in Lua.
local ddp = require "ddplua"
local core = ddp.core
local E = require "ddplua.errors"

local M = {}

local function check_text(who, text)
  if type(text) ~= "string" then E.raisef("%s: expected a string, got %s", who, type(text)) end
end

-- ids (tensor or list) -> a flat int64 CPU tensor
local function id_tensor(who, ids)
  if type(ids) == "table" and not ddp.is_tensor(ids) then
    if #ids == 0 then return nil end
    for i, v in ipairs(ids) do
      if math.type(v) ~= "integer" then E.raisef("%s: id at position %d is %s, expected an integer", who, i,
          tostring(v)) end
    end
    return ddp.tensor(ids, { dtype = "int64" })
  end
  if not ddp.is_tensor(ids) then E.raisef("%s: expected a tensor or a list of ids, got %s", who, type(ids)) end
  if ids:dtype() ~= "int64" then E.raisef("%s: ids must be int64, got %s", who, ids:dtype()) end
  if ids:numel() == 0 then return nil end
  return ids:detach():cpu():reshape(-1)
end

-- the first position (1-based) where t (int64 [n]) is outside lo..hi, or nil
local function first_outside(t, lo, hi)
  local bad = t:lt(lo):long() + t:gt(hi):long()
  if bad:sum():item() == 0 then return nil end
  return bad:argmax():item()
end

-- ByteTokenizer --------------------------------------------------------------

local Byte = { __name = "ByteTokenizer" }
Byte.__index = Byte
M.ByteTokenizer = setmetatable(Byte, { __call = function(c) return setmetatable({ vocab_size = 256 }, c) end })

function Byte:encode(text)
  check_text("ByteTokenizer:encode", text)
  if #text == 0 then return ddp.zeros(0, { dtype = "int64" }) end
  return core.frombuffer(text, { dtype = "uint8" }):long() + 1
end

function Byte:decode(ids)
  local t = id_tensor("ByteTokenizer:decode", ids)
  if t == nil then return "" end
  local bad = first_outside(t, 1, 256)
  if bad then E.raisef("ByteTokenizer:decode: id %d at position %d is outside 1..256", t[bad]:item(), bad) end
  return core.tobytes((t - 1):byte())
end

function Byte.__tostring() return "ByteTokenizer(vocab_size=256)" end

-- CharTokenizer ----------------------------------------------------------------

local Char = { __name = "CharTokenizer" }
Char.__index = Char

local function from_chars(chars)
  local stoi, ascii = {}, true
  for i, c in ipairs(chars) do
    stoi[c] = i
    if #c ~= 1 or c:byte() > 127 then ascii = false end
  end
  local self = setmetatable({ chars = chars, itos = chars, stoi = stoi, vocab_size = #chars }, Char)
  if ascii then
    -- byte -> id lookup for encode (0: not in the vocabulary), id -> byte for decode
    local lut, back = {}, {}
    for b = 0, 255 do lut[b + 1] = stoi[string.char(b)] or 0 end
    for i, c in ipairs(chars) do back[i] = c:byte() end
    self._lut = ddp.tensor(lut, { dtype = "int64" })
    self._back = ddp.tensor(back, { dtype = "int64" })
  end
  return self
end

local function code_points(who, text)
  local ok, n = pcall(utf8.len, text)
  if not ok or n == nil then
    E.raisef("%s: the text is not valid UTF-8 (at byte %s); data.ByteTokenizer takes any bytes", who,
      tostring(select(2, utf8.len(text))))
  end
  return n
end

M.CharTokenizer = setmetatable(Char, { __call = function(_, text)
  check_text("CharTokenizer", text)
  code_points("CharTokenizer", text)
  local seen, chars = {}, {}
  for _, cp in utf8.codes(text) do
    if not seen[cp] then
      seen[cp] = true
      chars[#chars + 1] = cp
    end
  end
  if #chars == 0 then E.raise("CharTokenizer: the text is empty; it has no characters to build a vocabulary of") end
  table.sort(chars)
  for i, cp in ipairs(chars) do chars[i] = utf8.char(cp) end
  return from_chars(chars)
end })

function Char:encode(text)
  check_text("CharTokenizer:encode", text)
  if #text == 0 then return ddp.zeros(0, { dtype = "int64" }) end
  if self._lut then
    local ids = self._lut:index_select(1, core.frombuffer(text, { dtype = "uint8" }):long() + 1)
    local bad = first_outside(ids, 1, self.vocab_size)
    if bad then
      E.raisef("CharTokenizer:encode: character %q at position %d is not in the vocabulary", text:sub(bad, bad), bad)
    end
    return ids
  end
  code_points("CharTokenizer:encode", text)
  local out, stoi, n = {}, self.stoi, 0
  for _, cp in utf8.codes(text) do
    n = n + 1
    local id = stoi[utf8.char(cp)]
    if id == nil then
      E.raisef("CharTokenizer:encode: character %q at position %d is not in the vocabulary", utf8.char(cp), n)
    end
    out[n] = id
  end
  return ddp.tensor(out, { dtype = "int64" })
end

function Char:decode(ids)
  local t = id_tensor("CharTokenizer:decode", ids)
  if t == nil then return "" end
  local bad = first_outside(t, 1, self.vocab_size)
  if bad then
    E.raisef("CharTokenizer:decode: id %d at position %d is outside 1..%d", t[bad]:item(), bad, self.vocab_size)
  end
  if self._back then return core.tobytes(self._back:index_select(1, t):byte()) end
  local parts, itos = {}, self.itos
  for i, id in ipairs(t:totable()) do parts[i] = itos[id] end
  return table.concat(parts)
end

function Char:__tostring() return string.format("CharTokenizer(vocab_size=%d)", self.vocab_size) end

local FORMAT = "ddplua.char_tokenizer/1"

--- tok:save(path): the vocabulary as JSON {"format":, "chars": [...]},
--- written atomically.
function Char:save(path)
  if type(path) ~= "string" or path == "" then E.raise("CharTokenizer:save: expected a file name, got " ..
      tostring(path)) end
  local text = core.json_encode({ format = FORMAT, chars = self.chars }, "CharTokenizer")
  local ok, err = pcall(require("ddplua.metrics").write_file, path, text .. "\n")
  if not ok then E.raise("CharTokenizer:save: " .. tostring(err):gsub("^[^\n]-%.lua:%d+: ", "")) end
end

function Char.load(path)
  if type(path) ~= "string" or path == "" then E.raise("CharTokenizer.load: expected a file name, got " ..
      tostring(path)) end
  local f, err = io.open(path, "rb")
  if not f then E.raise("CharTokenizer.load: cannot open " .. tostring(err)) end
  local text = f:read("a")
  f:close()
  local ok, v = pcall(core.json_decode, text, path)
  if not ok then E.raise("CharTokenizer.load: " .. tostring(v)) end
  if type(v) ~= "table" or v.format ~= FORMAT or type(v.chars) ~= "table" or #v.chars == 0 then
    E.raisef("CharTokenizer.load: %s is not a saved CharTokenizer (expected {\"format\": %q, \"chars\": [...]})",
      path, FORMAT)
  end
  local seen = {}
  for i, c in ipairs(v.chars) do
    if type(c) ~= "string" or utf8.len(c) ~= 1 or seen[c] then
      E.raisef("CharTokenizer.load: %s: entry %d of chars is not one distinct character", path, i)
    end
    seen[c] = true
  end
  return from_chars(v.chars)
end

return M
