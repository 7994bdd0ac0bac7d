-- data.CSVImageDataset: images listed in a CSV file (the seed tutorial's
-- CXRDataset), decoded and transformed in C by a pool of worker threads.
--
--   local ds = data.CSVImageDataset{csv = "data/labels.csv", split = "train", seed = 0,
--                                   channels = 1, transform = {T.Resize{28, 28}, T.ToTensor()}}
--   #ds; local x, y = ds:get(1)                 -- x float32 [C, H, W], y int64 scalar 1..K
--   ds:prefetch({1, 2, 3}); local xb, yb = ds:get_batch({1, 2, 3})   -- [B, C, H, W], [B]
--
-- Options (all but csv optional):
--   csv          the CSV file: a header row naming the columns, one image per row
--   root         directory the image paths are relative to (default: the CSV's directory)
--   path_column  "path";  label_column  "label"
--   split        nil (every row) | "train" | "valid" | "test": the rows are shuffled with
--                `seed` and cut by `splits` = {0.8, 0.1, 0.1} (PyTorch random_split's
--                rounding), so each row is in exactly one split and every rank agrees
--   seed         integer (default 0): the split, and the key of the random transforms
--   transform    a list of data.transforms (or a Compose); default {ToTensor()}
--   size         {H, W}: resize every image to H x W first (before `transform`)
--   channels     1 (grey) or 3 (RGB, the default, as torchvision's image loader)
--   num_workers  decoding threads (default min(4, cores)); 0 decodes on the calling thread
--
--   num_classes  K: integer labels must be 0..K-1 (default: largest id + 1, which may not
--                exceed the number of rows)
--
-- Labels: integer labels in the CSV are 0-based class ids (as in PyTorch) and become
-- 1..K (K = num_classes, else largest id + 1: a file of n rows holds at most n classes,
-- so a larger id is an error naming its row rather than K class names to allocate);
-- other labels are class names, numbered 1..K in sorted order (ds.classes lists them).
-- Every row must name a regular image file (a FIFO or a device is an error naming
-- the row when it is loaded). Random transforms depend on (seed, epoch, how many
-- times the item was loaded since set_epoch, the item's row), never on thread timing.
local core = require "ddplua.core"
local transforms = require "ddplua.data.transforms"

local CSVImageDataset = { __name = "ddplua.data.CSVImageDataset" }
-- ds[i] is {ds:get(i)}, as for every dataset of ddplua.data
CSVImageDataset.__index = function(self, k)
  if math.type(k) == "integer" then return { self:get(k) } end
  return CSVImageDataset[k]
end

local valid_options = {
  csv = true, root = true, transform = true, path_column = true, label_column = true, split = true,
  splits = true, seed = true, num_workers = true, size = true, channels = true, num_classes = true,
}

-- The most classes num_classes may declare (each has a name in ds.classes).
local MAX_CLASSES = 1 << 24

local function fail(fmt, ...) error("CSVImageDataset: " .. string.format(fmt, ...), 3) end

local function dirname(path) return path:match("^(.*)/[^/]*$") or "." end

local function join(root, path)
  if path:sub(1, 1) == "/" then return path end
  return root .. "/" .. path
end

local function where(csv, lines, r) return string.format("%s: row %d (line %d)", csv, r, lines[r]) end

-- Labels of every row -> 0-based class ids, the class names and K.
local function parse_labels(csv, column, values, lines, num_classes)
  local ids, classes = {}, {}
  local n = #values
  if n == 0 then return ids, classes end
  if values[1]:match("^[+-]?%d+$") then -- integer class ids
    local k = 0
    for r = 1, n do
      local v = values[r]
      local id = v:match("^%+?%d+$") and math.tointeger(tonumber(v))
      if not id then
        error(string.format("CSVImageDataset: %s: label '%s' in column '%s' is not a non-negative integer class " ..
          "id (the column holds 0-based integer ids; row 1's label is '%s')", where(csv, lines, r), v, column,
          values[1]), 3)
      end
      if num_classes and id >= num_classes then
        error(string.format("CSVImageDataset: %s: label %d in column '%s' is out of range for num_classes = %d " ..
          "(class ids are 0..%d)", where(csv, lines, r), id, column, num_classes, num_classes - 1), 3)
      elseif not num_classes and id >= n then
        error(string.format("CSVImageDataset: %s: label %d in column '%s' would make %s classes, more than the " ..
          "file's %d row%s (class ids are 0-based: 0..K-1); pass num_classes = K if the classes outnumber the rows",
          where(csv, lines, r), id, column, id == math.maxinteger and "2^63" or string.format("%d", id + 1), n,
          n == 1 and "" or "s"), 3)
      end
      ids[r] = id
      if id + 1 > k then k = id + 1 end
    end
    for c = 1, num_classes or k do classes[c] = tostring(c - 1) end
    return ids, classes
  end
  local seen = {}
  for r = 1, n do
    local v = values[r]
    if v == "" then
      error(string.format("CSVImageDataset: %s: empty label in column '%s'", where(csv, lines, r), column), 3)
    elseif tonumber(v) then
      error(string.format("CSVImageDataset: %s: label '%s' in column '%s' is a number but not a non-negative " ..
        "integer class id (row 1's label '%s' made this a column of class names)", where(csv, lines, r), v, column,
        values[1]), 3)
    end
    if not seen[v] then
      seen[v] = true
      classes[#classes + 1] = v
    end
  end
  table.sort(classes)
  if num_classes and num_classes ~= #classes then
    error(string.format("CSVImageDataset: %s: column '%s' names %d classes but num_classes = %d", csv, column,
      #classes, num_classes), 3)
  end
  local id_of = {}
  for c, name in ipairs(classes) do id_of[name] = c - 1 end
  for r = 1, n do ids[r] = id_of[values[r]] end
  return ids, classes
end

-- The rows (1-based, ascending) of the requested split.
local function split_rows(n, split, splits, seed)
  if split == nil then
    local rows = {}
    for r = 1, n do rows[r] = r end
    return rows
  end
  local which = ({ train = 1, valid = 2, test = 3 })[split]
  if not which then fail("split must be nil, \"train\", \"valid\" or \"test\", got %s", tostring(split)) end
  if type(splits) ~= "table" or #splits ~= 3 then
    fail("splits must be a list of 3 fractions {train, valid, test}, got %s", tostring(splits))
  end
  local sum = 0
  for i = 1, 3 do
    local f = splits[i]
    if type(f) ~= "number" or f < 0 or f > 1 then
      fail("splits[%d] = %s is not a fraction in [0, 1]", i, tostring(f))
    end
    sum = sum + f
  end
  if math.abs(sum - 1) > 1e-6 then
    fail("splits {%g, %g, %g} add up to %g, not 1", splits[1], splits[2], splits[3], sum)
  end
  -- PyTorch's random_split: floor each, then hand the remainder out in order
  local len, given = {}, 0
  for i = 1, 3 do
    len[i] = math.floor(n * splits[i])
    given = given + len[i]
  end
  for i = 0, n - given - 1 do len[i % 3 + 1] = len[i % 3 + 1] + 1 end
  local perm = core.image.permutation(n, seed)
  local first = 1
  for i = 1, which - 1 do first = first + len[i] end
  local rows = table.move(perm, first, first + len[which] - 1, 1, {})
  table.sort(rows)
  return rows
end

local function check_integer(v, what, min)
  if v ~= nil and (math.type(v) ~= "integer" or v < min) then
    fail("%s must be an integer >= %d, got %s", what, min, tostring(v))
  end
  return v
end

local function new(opts)
  if type(opts) ~= "table" then fail("expected an options table {csv = ..., ...}, got %s", type(opts)) end
  for k in pairs(opts) do
    if not valid_options[k] then
      local names = {}
      for name in pairs(valid_options) do names[#names + 1] = name end
      table.sort(names)
      fail("unknown option '%s' (valid options: %s)", tostring(k), table.concat(names, ", "))
    end
  end
  local csv = opts.csv
  if type(csv) ~= "string" then fail("csv must be the path of a CSV file, got %s", tostring(csv)) end
  local root = opts.root or dirname(csv)
  if type(root) ~= "string" then fail("root must be a directory path, got %s", tostring(root)) end
  local path_column, label_column = opts.path_column or "path", opts.label_column or "label"
  local channels = opts.channels or 3
  if channels ~= 1 and channels ~= 3 then fail("channels must be 1 or 3, got %s", tostring(channels)) end
  local seed = check_integer(opts.seed, "seed", 0) or 0
  local num_workers = check_integer(opts.num_workers, "num_workers", 0)

  local list = transforms.list(opts.transform or { transforms.ToTensor() }, "CSVImageDataset transform")
  local pipeline = list
  if opts.size ~= nil then
    local s = opts.size
    if type(s) ~= "table" or #s ~= 2 or math.type(s[1]) ~= "integer" or math.type(s[2]) ~= "integer"
        or s[1] < 1 or s[2] < 1 then
      fail("size must be {H, W} with positive integers, got %s", tostring(s))
    end
    pipeline = { transforms.Resize { s[1], s[2] }, table.unpack(list) }
  end

  local t = core.image.read_csv(csv)
  for _, col in ipairs { path_column, label_column } do
    if not t.columns[col] then
      fail("CSV file '%s' has no column '%s' (its columns: %s)", csv, col, table.concat(t.header, ", "))
    end
  end
  local num_classes = check_integer(opts.num_classes, "num_classes", 1)
  if num_classes and num_classes > MAX_CLASSES then
    fail("num_classes must be an integer in 1..%d, got %d", MAX_CLASSES, num_classes)
  end
  local ids, classes = parse_labels(csv, label_column, t.columns[label_column], t.lines, num_classes)
  local rows = split_rows(t.nrows, opts.split, opts.splits or { 0.8, 0.1, 0.1 }, seed)

  local paths, labels, lines = {}, {}, {}
  local names = t.columns[path_column]
  for i, r in ipairs(rows) do
    if names[r] == "" then
      error(string.format("CSVImageDataset: %s: empty image path in column '%s'", where(csv, t.lines, r),
        path_column), 2)
    end
    paths[i], labels[i], lines[i] = join(root, names[r]), ids[r], t.lines[r]
  end
  local set = core.image.dataset {
    csv = csv, paths = paths, labels = labels, rows = rows, lines = lines, channels = channels,
    transforms = pipeline, seed = seed, num_workers = num_workers,
  }
  local info = set:info()
  return setmetatable({
    csv = csv,
    root = root,
    split = opts.split,
    seed = seed,
    channels = channels,
    classes = classes,
    num_classes = #classes,
    transform = list,
    image_shape = info.item_shape, -- {C, H, W} of batch items
    num_workers = info.num_workers,
    _set = set,
    _rows = rows,
    _paths = paths,
    _labels = labels,
  }, CSVImageDataset)
end

function CSVImageDataset.__len(self) return #self._rows end
function CSVImageDataset:len() return #self._rows end

local function check_index(self, i, what)
  if math.type(i) ~= "integer" or i < 1 or i > #self._rows then
    error(string.format("CSVImageDataset:%s: index %s is out of range 1..%d", what, tostring(i), #self._rows), 3)
  end
end

--- ds:get(i) -> x float32 [C, H, W], y int64 scalar tensor (1..K)
function CSVImageDataset:get(i)
  check_index(self, i, "get")
  local x, y = self._set:get(i)
  return x, core.tensor(y)
end

--- ds:get_batch(indices) -> x float32 [B, C, H, W], y int64 [B]; indices is a
--- Lua array (or int64 tensor) of 1-based positions.
function CSVImageDataset:get_batch(indices) return self._set:get_batch(indices) end

--- ds:prefetch(indices): the next get_batch will be these; decoding starts now.
function CSVImageDataset:prefetch(indices) self._set:prefetch(indices) end

--- ds:set_epoch(e): random transforms restart from epoch e's stream (a resumed
--- run reproduces the augmentations of an uninterrupted one).
function CSVImageDataset:set_epoch(e) self._set:set_epoch(e) end

--- The CSV data row (1-based, header excluded), the image file and the label
--- (1..K) of item i.
function CSVImageDataset:row(i)
  check_index(self, i, "row")
  return self._rows[i]
end
function CSVImageDataset:path(i)
  check_index(self, i, "path")
  return self._paths[i]
end
function CSVImageDataset:label(i)
  check_index(self, i, "label")
  return self._labels[i] + 1
end

--- Prefetch statistics: {prefetch_hits=, prefetch_misses=, prefetch_discarded=, ...}
function CSVImageDataset:info() return self._set:info() end

--- Stops the worker threads (also done by the garbage collector and by
--- `local ds <close> = ...`).
function CSVImageDataset:close() self._set:close() end
CSVImageDataset.__close = CSVImageDataset.close

function CSVImageDataset.__tostring(self)
  return string.format("CSVImageDataset(%s%s, %d items, %d classes, item %dx%dx%d)", self.csv,
    self.split and (", " .. self.split) or "", #self._rows, self.num_classes, self.image_shape[1],
    self.image_shape[2], self.image_shape[3])
end

return setmetatable(CSVImageDataset, { __call = function(_, opts) return new(opts) end })
