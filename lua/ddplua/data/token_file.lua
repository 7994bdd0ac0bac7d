-- data.TokenFile{path=, dtype="uint16"|"uint8", block_size=, generator=, seed=}:
-- a flat binary file of token ids (nanoGPT's train.bin / val.bin: numpy's
-- uint16 tofile, little-endian), read through a memory map in C, so a file
-- of any size costs no memory until windows are read.
--
--   local train = data.TokenFile { path = "train.bin", block_size = 256, seed = 1337 }
--   local x, y = train:sample(64)     -- int64 [64, 256]: random windows, y = x one token later
--
-- Ids are 1-based, as ddplua's embeddings take them: file id t comes out as
-- t + 1 (what data.ByteTokenizer / CharTokenizer encode to), and
-- TokenFile.write stores id - 1, so files stay nanoGPT's.
--
-- Random windows (sample) come from, in order of preference: generator= (a
-- ddp.Generator), a Generator(seed + rank) for seed= (each rank of the
-- process group, or RANK, draws its own windows, reproducibly), else the
-- global generator (seeded per rank by ddp.seed_everything(seed + rank)).
-- state_dict()/load_state_dict() carry the generator's position, so a
-- checkpoint (sampler=) resumes the same windows.
--
-- It is also a dataset: #tf windows, tf:get(i) the window starting at token
-- i (x, y of block_size ids), tf:get_batch(starts); with a DataLoader and a
-- DistributedSampler that covers every window once per epoch.
local ddp = require "ddplua"
local core = ddp.core
local dataset = require "ddplua.data.dataset"
local E = require "ddplua.errors"

local TokenFile = dataset.dataset_class("TokenFile")

local OPTS = { path = true, dtype = true, block_size = true, generator = true, seed = true }

local function rank_of()
  local dist = package.loaded["ddplua.distributed"]
  if dist and dist.is_initialized() then return dist.get_rank() end
  return math.tointeger(tonumber(os.getenv("RANK") or "")) or 0
end

function TokenFile.new(opts)
  if type(opts) ~= "table" then E.raise("TokenFile: expected an options table {path=, block_size=, ...}") end
  for k in pairs(opts) do
    if not OPTS[k] then
      E.raise("TokenFile: unknown option '" .. tostring(k) .. "' (valid options: path, dtype, block_size, " ..
        "generator, seed)")
    end
  end
  if type(opts.path) ~= "string" or opts.path == "" then E.raise("TokenFile: path must be a file name") end
  local dtype = opts.dtype or "uint16"
  if dtype ~= "uint16" and dtype ~= "uint8" then
    E.raise('TokenFile: dtype must be "uint16" or "uint8", got ' .. tostring(dtype))
  end
  local block = opts.block_size
  if math.type(block) ~= "integer" or block < 1 then
    E.raise("TokenFile: block_size must be a positive integer, got " .. tostring(block))
  end
  local g = opts.generator
  if g ~= nil and (type(g) ~= "table" or math.type(g.seed) ~= "integer" or math.type(g.offset) ~= "integer") then
    E.raise("TokenFile: generator must be a ddp.Generator, got " .. type(g))
  end
  if opts.seed ~= nil then
    if g ~= nil then E.raise("TokenFile: give generator= or seed=, not both") end
    if math.type(opts.seed) ~= "integer" then E.raise("TokenFile: seed must be an integer, got " .. tostring(opts.seed)) end
    g = ddp.Generator(opts.seed + rank_of())
  end
  local ok, f = pcall(core._token_file, opts.path, dtype)
  if not ok then E.raise("TokenFile: " .. tostring(f)) end
  local n = f:len()
  if n <= block then
    E.raisef("TokenFile: %s holds %d tokens; a window of block_size %d and its next-token targets need %d", opts.path,
      n, block, block + 1)
  end
  return setmetatable({ path = opts.path, dtype = dtype, block_size = block, generator = g, _file = f, _n = n },
    TokenFile)
end

--- Tokens in the file.
function TokenFile:num_tokens() return self._n end

--- Windows: every start with a full window and its targets.
function TokenFile:len() return self._n - self.block_size end

function TokenFile:get(i)
  dataset.check_position("TokenFile", i, self:len())
  local x, y = self._file:windows({ i }, self.block_size)
  return x[1], y[1]
end

function TokenFile:get_batch(starts)
  local ok, x, y = pcall(self._file.windows, self._file, starts, self.block_size)
  if not ok then E.raise("TokenFile: " .. tostring(x)) end
  return x, y
end

--- sample(batch_size): x, y int64 [batch_size, block_size] at random starts.
function TokenFile:sample(batch_size)
  if math.type(batch_size) ~= "integer" or batch_size < 1 then
    E.raise("TokenFile:sample: batch_size must be a positive integer, got " .. tostring(batch_size))
  end
  return self._file:sample(batch_size, self.block_size, self.generator)
end

function TokenFile:state_dict()
  if self.generator == nil then return {} end
  return { seed = self.generator.seed, offset = self.generator.offset }
end

function TokenFile:load_state_dict(s)
  if type(s) ~= "table" then E.raise("TokenFile:load_state_dict: expected a table from state_dict()") end
  if s.seed ~= nil then
    if self.generator == nil then
      E.raise("TokenFile:load_state_dict: the state has a generator position; create the TokenFile with seed= " ..
        "or generator=")
    end
    self.generator.seed, self.generator.offset = s.seed, s.offset
  end
end

function TokenFile:close() self._file:close() end

--- TokenFile.write(path, ids [, {dtype="uint16"}]): ids (an int64 tensor or a
--- Lua list of 1-based ids) as a token file, atomically.
function TokenFile.write(path, ids, opts)
  if type(path) ~= "string" or path == "" then E.raise("TokenFile.write: expected a file name, got " .. tostring(path)) end
  opts = opts or {}
  for k in pairs(opts) do
    if k ~= "dtype" then E.raise("TokenFile.write: unknown option '" .. tostring(k) .. "' (valid options: dtype)") end
  end
  if type(ids) == "table" and not ddp.is_tensor(ids) then ids = ddp.tensor(ids, { dtype = "int64" }) end
  if not ddp.is_tensor(ids) or ids:dtype() ~= "int64" then
    E.raise("TokenFile.write: ids must be an int64 tensor or a list of integers")
  end
  local ok, err = pcall(core._token_file_write, path, ids:reshape(-1), opts.dtype or "uint16")
  if not ok then E.raise("TokenFile.write: " .. tostring(err)) end
end

return TokenFile
