-- data.FashionMNIST{root="/usr/share/datasets/fashion-mnist", split="train"|"test", cache_dir=}
-- Reads the gzip'd IDX files (in C, with zlib). The first load keeps the
-- decompressed files in cache_dir (default $DDPLUA_CACHE_DIR, else
-- $XDG_CACHE_HOME/ddplua, else ~/.cache/ddplua; false, "" or "off": none),
-- named after each source's size and mtime; later loads read those (20 ms
-- instead of 150 ms for the training images). Images stay uint8 in memory
-- (47 MB for the training split instead of 188 MB of float32) and become
-- float32 in [0, 1] when a batch is gathered; labels are int64 1..10.
-- Items: x float32 [1, 28, 28], y the label (an integer 1..10).
--
-- transform= (torchvision's argument) changes each image as it is read: a
-- Lua function of the item's x (float32 [1, 28, 28] in [0, 1], what ToTensor
-- gives in torchvision) returning the new x, or a data.transforms list /
-- Compose, which runs in C on the uint8 image (as [28, 28, 1], PIL's
-- layout; end it with T.ToTensor() for values in [0, 1]). target_transform=
-- is a function of the label. With either, batches are built item by item
-- (and in parallel by DataLoader{num_workers=}); without, a batch is one C
-- gather.
local ddp = require "ddplua"
local core = ddp.core
local dataset = require "ddplua.data.dataset"
local E = require "ddplua.errors"

local FashionMNIST = dataset.dataset_class("FashionMNIST")

FashionMNIST.default_root = "/usr/share/datasets/fashion-mnist"
FashionMNIST.classes = { "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
  "Ankle boot" }

local prefixes = { train = "train", test = "t10k" }

local function file_exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

-- <root>/<name>.gz, or the uncompressed file when only that is there.
local function locate(root, name)
  local gz = root .. "/" .. name .. ".gz"
  if not file_exists(gz) and file_exists(root .. "/" .. name) then return root .. "/" .. name end
  return gz
end

--- The cache directory from the option or the environment, or nil for none.
function FashionMNIST.cache_dir(opt)
  local dir = opt
  if dir == nil then
    dir = os.getenv("DDPLUA_CACHE_DIR")
    if dir == nil then
      local xdg, home = os.getenv("XDG_CACHE_HOME"), os.getenv("HOME")
      if xdg and xdg ~= "" then dir = xdg .. "/ddplua"
      elseif home and home ~= "" then dir = home .. "/.cache/ddplua" end
    end
  end
  if dir == false or dir == "" or dir == "off" then return nil end
  if type(dir) ~= "string" then
    E.raise("FashionMNIST: cache_dir must be a directory path, false or \"off\", got " .. type(dir))
  end
  return dir
end

local function load(path, cache_dir)
  local ok, t = pcall(core._idx_load, path, cache_dir)
  if ok then return t end
  local msg = tostring(t)
  if msg:find("cannot open", 1, true) then
    error(string.format("FashionMNIST: %s; install the Debian package dataset-fashion-mnist (apt-get install "
      .. "dataset-fashion-mnist) or pass root= with the directory that holds the files", msg), 0)
  end
  error("FashionMNIST: " .. msg, 0)
end

function FashionMNIST.new(opts)
  opts = opts or {}
  if type(opts) ~= "table" then E.raise("FashionMNIST: expected an options table {root=, split=}") end
  for k in pairs(opts) do
    if k ~= "root" and k ~= "split" and k ~= "cache_dir" and k ~= "transform" and k ~= "target_transform" then
      E.raise("FashionMNIST: unknown option '" .. tostring(k) .. "' (valid options: root, split, cache_dir, " ..
        "transform, target_transform)")
    end
  end
  local transform, pipeline = opts.transform, nil
  if transform ~= nil and type(transform) ~= "function" then
    pipeline = require("ddplua.data.transforms").list(transform, "FashionMNIST: transform")
    transform = nil
  end
  if opts.target_transform ~= nil and type(opts.target_transform) ~= "function" then
    E.raise("FashionMNIST: target_transform must be a function of the label, got " .. type(opts.target_transform))
  end
  local split = opts.split or "train"
  local prefix = prefixes[split]
  if not prefix then E.raise('FashionMNIST: split must be "train" or "test", got ' .. tostring(split)) end
  local root = opts.root or FashionMNIST.default_root
  local image_path = locate(root, prefix .. "-images-idx3-ubyte")
  local label_path = locate(root, prefix .. "-labels-idx1-ubyte")
  local cache_dir = FashionMNIST.cache_dir(opts.cache_dir)
  local images, labels = load(image_path, cache_dir), load(label_path, cache_dir)
  if images:dim() ~= 3 then
    E.raise(string.format("FashionMNIST: %s holds a %d-dimensional array, expected images [N, 28, 28]", image_path,
      images:dim()))
  end
  if labels:dim() ~= 1 then
    E.raise(string.format("FashionMNIST: %s holds a %d-dimensional array, expected labels [N]", label_path,
      labels:dim()))
  end
  if images:size(1) ~= labels:size(1) then
    E.raise(string.format("FashionMNIST: %s holds %d images but %s holds %d labels", image_path, images:size(1),
      label_path, labels:size(1)))
  end
  if labels:numel() > 0 and labels:max():item() > 9 then
    E.raise(string.format("FashionMNIST: %s holds label %d, expected 0..9", label_path, labels:max():item()))
  end
  local self = setmetatable({
    split = split,
    root = root,
    transform = transform,
    target_transform = opts.target_transform,
    _pipeline = pipeline,
    -- [N, 1, 28, 28] so batches come out NCHW
    images = images:view(images:size(1), 1, images:size(2), images:size(3)),
    labels = labels:long() + 1,
  }, FashionMNIST)
  if transform or pipeline or opts.target_transform then
    -- item by item: the DataLoader collates (or its workers build) the batches
    rawset(self, "get_batch", false)
    rawset(self, "prefetch", false)
  end
  return self
end

function FashionMNIST:len() return self.labels:size(1) end

--- x float32 [B, 1, 28, 28] in [0, 1], y int64 [B] in 1..10
function FashionMNIST:get_batch(indices)
  return core._gather_rows(self.images, indices, "float32", 255), core._gather_rows(self.labels, indices)
end

function FashionMNIST:get(i)
  dataset.check_position("FashionMNIST", i, self:len())
  local x, y = FashionMNIST.get_batch(self, { i })
  x, y = x[1], y[1]:item()
  if self._pipeline then
    -- the uint8 image as H x W x C for the C pipeline
    x = core.image.apply(self._pipeline, self.images[i]:permute(2, 3, 1):contiguous())
  elseif self.transform then
    x = self.transform(x)
  end
  if self.target_transform then y = self.target_transform(y) end
  return x, y
end

return FashionMNIST
