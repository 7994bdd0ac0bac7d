-- Writes Fashion-MNIST items as image files plus a labels.csv (path,label),
-- the layout data.CSVImageDataset reads (the seed tutorial's CXR dataset):
--
--   ddplua examples/csv_images/make_dataset.lua out=runs/fashion_csv n=2000
--
-- Options (key=value): out (directory), n (items), split (train|test: which
-- Fashion-MNIST file), format (png|jpg), source (the IDX directory).
-- Labels are written 0-based, as the IDX files and PyTorch datasets hold them.
local ddp = require "ddplua"
local image = ddp.core.image

local defaults = { out = "runs/fashion_csv", n = 2000, split = "train", format = "png",
                   source = "/usr/share/datasets/fashion-mnist" }

-- key=value arguments over the defaults, typed like the defaults
local function options(args)
  local o = {}
  for k, v in pairs(defaults) do o[k] = v end
  for _, a in ipairs(args) do
    local k, v = a:match("^([%w_]+)=(.*)$")
    if not k or defaults[k] == nil then
      error(string.format("make_dataset: unexpected argument '%s' (expected key=value with a key among: out, n, " ..
        "split, format, source)", a), 0)
    end
    o[k] = type(defaults[k]) == "number" and math.tointeger(tonumber(v)) or v
    if o[k] == nil then error(string.format("make_dataset: %s must be an integer, got '%s'", k, v), 0) end
  end
  return o
end

local opt = options(arg or {})
if opt.split ~= "train" and opt.split ~= "test" then error("make_dataset: split must be train or test", 0) end
if opt.format ~= "png" and opt.format ~= "jpg" then error("make_dataset: format must be png or jpg", 0) end
local prefix = opt.split == "train" and "train" or "t10k"
local images = image.read_idx(string.format("%s/%s-images-idx3-ubyte.gz", opt.source, prefix), opt.n)
local labels = image.read_idx(string.format("%s/%s-labels-idx1-ubyte.gz", opt.source, prefix), opt.n):totable()
local n = images:size(1)

local function shell_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
assert(os.execute("mkdir -p " .. shell_quote(opt.out .. "/images")), "make_dataset: cannot create " .. opt.out)

local csv = assert(io.open(opt.out .. "/labels.csv", "w"))
csv:write("path,label\n")
local t0 = ddp.clock()
for i = 1, n do
  local name = string.format("images/%05d.%s", i - 1, opt.format)
  local img = images[i] -- uint8 [28, 28]
  if opt.format == "png" then image.write_png(opt.out .. "/" .. name, img)
  else image.write_jpeg(opt.out .. "/" .. name, img, 95) end
  csv:write(name, ",", labels[i], "\n")
end
csv:close()
print(string.format("wrote %d %s images and %s/labels.csv in %.2f s", n, opt.format, opt.out, ddp.clock() - t0))
