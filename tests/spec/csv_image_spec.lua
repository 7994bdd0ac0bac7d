-- data.CSVImageDataset and data.transforms: decoding, transforms against a
-- float64 reference written here, determinism across worker counts and with
-- prefetching, the train/valid/test split, labels, and every user error
-- naming the CSV file and row.
local ddp = require "ddplua"
local CSVImageDataset = require "ddplua.data.csv_image"
local T = require "ddplua.data.transforms"
local image = ddp.core.image


local io_util = require "helpers.io_util"
local make_dir, write_text = io_util.tmpdir, io_util.write

-- A uint8 [h, w, c] image with pseudo-random content from `seed`.
local function random_image(h, w, c, seed)
  local state = seed * 2654435761 % 4294967296
  local rows = {}
  for y = 1, h do
    local row = {}
    for x = 1, w do
      local px = {}
      for k = 1, c do
        state = (state * 1103515245 + 12345) % 2147483648
        px[k] = state % 256
      end
      row[x] = px
    end
    rows[y] = row
  end
  return ddp.tensor(rows, { dtype = "uint8" })
end

-- uint8 [h, w, c] tensor -> float64 planes p[c][y][x] (0..255)
local function planes(img)
  local t = img:totable()
  local h, w, c = #t, #t[1], #t[1][1]
  local p = {}
  for k = 1, c do
    p[k] = {}
    for y = 1, h do
      p[k][y] = {}
      for x = 1, w do p[k][y][x] = t[y][x][k] end
    end
  end
  return p
end

local function dims(p) return #p, #p[1], #p[1][1] end

-- PyTorch's bilinear interpolate (align_corners=False, no antialias) in float64.
local function resize_ref(p, oh, ow)
  local c, h, w = dims(p)
  local function src(o, n_in, n_out)
    local s = (o - 0.5) * n_in / n_out - 0.5 -- o is 1-based: (o - 1 + 0.5)
    if s < 0 then s = 0 end
    local i0 = math.floor(s)
    if i0 > n_in - 1 then i0 = n_in - 1 end
    local i1 = i0 < n_in - 1 and i0 + 1 or i0
    return i0 + 1, i1 + 1, s - i0
  end
  local out = {}
  for k = 1, c do
    out[k] = {}
    for y = 1, oh do
      local y0, y1, ty = src(y, h, oh)
      out[k][y] = {}
      for x = 1, ow do
        local x0, x1, tx = src(x, w, ow)
        local top = p[k][y0][x0] * (1 - tx) + p[k][y0][x1] * tx
        local bot = p[k][y1][x0] * (1 - tx) + p[k][y1][x1] * tx
        out[k][y][x] = top * (1 - ty) + bot * ty
      end
    end
  end
  return out
end

-- Counter-clockwise rotation about the centre, bilinear, zero outside.
local function rotate_ref(p, deg)
  local c, h, w = dims(p)
  local r = math.rad(deg)
  local cs, sn = math.cos(r), math.sin(r)
  local cx, cy = (w - 1) / 2, (h - 1) / 2
  local out = {}
  for k = 1, c do
    out[k] = {}
    for y = 0, h - 1 do
      out[k][y + 1] = {}
      for x = 0, w - 1 do
        local dx, dy = x - cx, y - cy
        local sx, sy = cx + dx * cs - dy * sn, cy + dx * sn + dy * cs
        local x0, y0 = math.floor(sx), math.floor(sy)
        local u, v = sx - x0, sy - y0
        local acc = 0
        for _, n in ipairs { { x0, y0, (1 - u) * (1 - v) }, { x0 + 1, y0, u * (1 - v) },
          { x0, y0 + 1, (1 - u) * v }, { x0 + 1, y0 + 1, u * v } } do
          if n[1] >= 0 and n[1] < w and n[2] >= 0 and n[2] < h then acc = acc + n[3] * p[k][n[2] + 1][n[1] + 1] end
        end
        out[k][y + 1][x + 1] = acc
      end
    end
  end
  return out
end

local function map(p, f)
  local c, h, w = dims(p)
  local out = {}
  for k = 1, c do
    out[k] = {}
    for y = 1, h do
      out[k][y] = {}
      for x = 1, w do out[k][y][x] = f(p[k][y][x], k, y, x) end
    end
  end
  return out
end

-- max |a - b| over float planes (tensor vs reference tables)
local function max_diff(t, ref)
  local got = t:totable()
  local c, h, w = dims(ref)
  assert.are.same({ c, h, w }, { #got, #got[1], #got[1][1] })
  local worst = 0
  for k = 1, c do
    for y = 1, h do
      for x = 1, w do worst = math.max(worst, math.abs(got[k][y][x] - ref[k][y][x])) end
    end
  end
  return worst
end

local function same_tensor(a, b)
  assert.are.same(a:size(), b:size())
  return (a - b):abs():max():item() == 0
end

describe("core.image files", function()
  local dir
  setup(function() dir = make_dir() end)
  teardown(function() io_util.rm_rf(dir) end)

  it("writes and reads PNG exactly and JPEG closely, converting channels", function()
    local img = random_image(9, 12, 3, 1)
    image.write_png(dir .. "/a.png", img)
    assert.is_true(same_tensor(img, image.read(dir .. "/a.png")))
    -- grey from RGB is the ITU-R 601 luma PIL's convert("L") uses
    local grey, rgb = image.read(dir .. "/a.png", 1):totable(), img:totable()
    for y = 1, 9 do
      for x = 1, 12 do
        local p = rgb[y][x]
        assert.are.equal((19595 * p[1] + 38470 * p[2] + 7471 * p[3] + 32768) >> 16, grey[y][x][1])
      end
    end
    local g = random_image(8, 8, 1, 2)
    image.write_png(dir .. "/g.png", g)
    local g3 = image.read(dir .. "/g.png", 3)
    assert.is_true(same_tensor(g3:narrow(3, 2, 1), g) and same_tensor(g3:narrow(3, 3, 1), g))
    -- smooth content survives JPEG at quality 100 within a few levels
    local smooth = {}
    for y = 1, 16 do
      smooth[y] = {}
      for x = 1, 16 do smooth[y][x] = { 60 + 5 * x, 80 + 4 * y, 100 + 2 * (x + y) } end
    end
    smooth = ddp.tensor(smooth, { dtype = "uint8" })
    image.write_jpeg(dir .. "/s.jpg", smooth, 100)
    local back = image.read(dir .. "/s.jpg")
    assert.are.same({ 16, 16, 3 }, back:size())
    assert.is_true((back:double() - smooth:double()):abs():max():item() <= 3)
  end)

  it("names the file and the reason when decoding fails", function()
    local ok, err = pcall(image.read, dir .. "/none.png")
    assert.is_false(ok)
    assert.matches("none.png': cannot open: No such file", err, 1, true)
    write_text(dir .. "/x.jpg", "\255\216\255\224 and then nothing useful")
    ok, err = pcall(image.read, dir .. "/x.jpg")
    assert.is_false(ok)
    assert.matches("x.jpg': corrupt JPEG data", err, 1, true)
    ok, err = pcall(image.write_png, dir .. "/f.png", ddp.zeros(2, 2))
    assert.is_false(ok)
    assert.matches("uint8", err)
  end)
end)

describe("data.transforms", function()
  local img = random_image(11, 13, 3, 7)
  local p = planes(img)

  it("Resize, ToTensor and Normalize match a float64 reference", function()
    local mean, std = { 0.1, 0.2, 0.3 }, { 0.5, 0.6, 0.7 }
    local tf = T.Compose { T.Resize { 7, 20 }, T.ToTensor(), T.Normalize { mean = mean, std = std } }
    local ref = map(resize_ref(p, 7, 20), function(v, k) return (v / 255 - mean[k]) / std[k] end)
    assert.is_true(max_diff(tf(img), ref) < 1e-5)
    -- one size: the smaller edge (11 -> 5), the other int(5 * 13 / 11) = 5; and 13 -> 4 of a 13x11 image
    assert.is_true(max_diff(T.Resize(5)(img), resize_ref(p, 5, 5)) < 1e-3)
    local tall = random_image(13, 11, 1, 3) -- smaller edge 11 -> 8, 13 -> int(8 * 13 / 11) = 9
    assert.are.same({ 1, 9, 8 }, T.Resize(8)(tall):size())
    -- Normalize with one entry applies to every channel; ToTensor is x / 255
    local one = T.Compose { T.ToTensor(), T.Normalize({ 0.5 }, { 0.25 }) }(img)
    assert.is_true(max_diff(one, map(p, function(v) return (v / 255 - 0.5) / 0.25 end)) < 1e-5)
  end)

  it("rotates by quarter turns exactly and by other angles as the reference", function()
    local sq = random_image(9, 9, 2, 11)
    local q = planes(sq)
    local n = 9
    local r90 = T.RandomRotation { 90, 90 }(sq)
    local r180 = T.RandomRotation { 180, 180 }(sq)
    local rm90 = T.RandomRotation { -90, -90 }(sq)
    -- counter-clockwise: out[y][x] = in[x][n+1-y] (1-based), as torch.rot90(img, 1, (H, W))
    assert.are.equal(0, max_diff(r90, map(q, function(_, k, y, x) return q[k][x][n + 1 - y] end)))
    assert.are.equal(0, max_diff(r180, map(q, function(_, k, y, x) return q[k][n + 1 - y][n + 1 - x] end)))
    assert.are.equal(0, max_diff(rm90, map(q, function(_, k, y, x) return q[k][n + 1 - x][y] end)))
    for _, deg in ipairs { 33, -71.5, 200 } do
      assert.is_true(max_diff(T.RandomRotation { deg, deg }(img), rotate_ref(p, deg)) < 1e-3)
    end
  end)

  it("flips horizontally with probability p", function()
    local flipped = T.RandomHorizontalFlip(1)(img)
    assert.are.equal(0, max_diff(flipped, map(p, function(_, k, y, x) return p[k][y][14 - x] end)))
    assert.are.equal(0, max_diff(T.RandomHorizontalFlip(0)(img), p))
    -- p = 0.5: over many items both outcomes occur, each item's is fixed by its key
    local flips = 0
    for item = 1, 64 do
      local out = T.RandomHorizontalFlip()(img, { seed = 5, item = item })
      local again = T.RandomHorizontalFlip()(img, { seed = 5, item = item })
      assert.is_true(same_tensor(out, again))
      if max_diff(out, p) > 0 then flips = flips + 1 end
    end
    assert.is_true(flips > 16 and flips < 48)
  end)

  it("draws rotation angles inside the range, keyed by seed and item", function()
    local tf = T.Compose { T.RandomRotation(10), T.ToTensor() }
    local a = tf(img, { seed = 1, item = 3 })
    assert.is_true(same_tensor(a, tf(img, { seed = 1, item = 3 })))
    assert.is_false(same_tensor(a, tf(img, { seed = 1, item = 4 })))
    assert.is_false(same_tensor(a, tf(img, { seed = 1, item = 3, draw = 1 })))
    -- a random angle in [-10, 10]: the result equals the reference for some angle in that range,
    -- found by refining a grid around the best angle so far
    local function err_at(deg) return max_diff(a, map(rotate_ref(p, deg), function(v) return v / 255 end)) end
    local lo, hi, step, best, best_err = -10, 10, 0.5, 0, math.huge
    while step > 1e-7 do
      for deg = lo, hi + step / 2, step do
        local e = err_at(deg)
        if e < best_err then best, best_err = deg, e end
      end
      lo, hi, step = math.max(-10, best - step), math.min(10, best + step), step / 10
    end
    assert.is_true(best_err < 1e-5)
  end)

  it("rejects bad transforms with messages naming them", function()
    local function err_of(f, ...)
      local ok, e = pcall(f, ...)
      assert.is_false(ok)
      return e
    end
    assert.matches("Resize: expected", err_of(T.Resize, { 1, 2, 3 }))
    assert.matches("Resize: height must be a positive integer", err_of(T.Resize, { 0, 4 }))
    assert.matches("RandomRotation: range {5, 1} has min > max", err_of(T.RandomRotation, { 5, 1 }))
    assert.matches("RandomHorizontalFlip: p must be", err_of(T.RandomHorizontalFlip, 2))
    assert.matches("Normalize: mean has 2 entries but std has 1", err_of(T.Normalize, { mean = { 1, 2 }, std = { 1 } }))
    assert.matches("std%[1%] is 0", err_of(T.Normalize, { 0 }, { 0 }))
    assert.matches("entry 2 is a function", err_of(T.Compose, { T.ToTensor(), function() end }))
    assert.matches("transform 1 %(Normalize%): needs ToTensor before it",
      err_of(T.Compose { T.Normalize({ 0.5 }, { 0.5 }), T.ToTensor() }, img))
    assert.matches("2 means/stds for images with 3 channels",
      err_of(T.Compose { T.ToTensor(), T.Normalize({ 0.5, 0.5 }, { 1, 1 }) }, img))
  end)
end)

-- A dataset directory: n images (PNG, every third JPEG) of sizes from
-- `side(i)`, and labels.csv with `label(i)`.
local function make_dataset(dir, n, opts)
  opts = opts or {}
  local lines = { "path,label" }
  for i = 1, n do
    local name = string.format("img_%03d.%s", i, i % 3 == 0 and "jpg" or "png")
    local s = opts.side and opts.side(i) or 12
    local img = random_image(s, s, opts.channels or 3, i)
    if i % 3 == 0 then image.write_jpeg(dir .. "/" .. name, img, 95) else image.write_png(dir .. "/" .. name, img) end
    lines[#lines + 1] = name .. "," .. (opts.label and opts.label(i) or tostring((i - 1) % 4))
  end
  write_text(dir .. "/labels.csv", table.concat(lines, "\n") .. "\n")
  return dir .. "/labels.csv"
end

describe("data.CSVImageDataset", function()
  local dir, csv
  local augment = { T.Resize { 10, 8 }, T.RandomRotation(20), T.RandomHorizontalFlip(), T.ToTensor(),
    T.Normalize { mean = { 0.5, 0.4, 0.3 }, std = { 0.2, 0.2, 0.2 } } }
  setup(function()
    dir = make_dir()
    csv = make_dataset(dir, 30)
  end)
  teardown(function() io_util.rm_rf(dir) end)

  it("loads items and batches: x [B, C, H, W] float32, y int64 labels 1..K", function()
    local ds = CSVImageDataset { csv = csv, transform = { T.ToTensor() }, num_workers = 2 }
    assert.are.equal(30, #ds)
    assert.are.equal(4, ds.num_classes)
    assert.are.same({ "0", "1", "2", "3" }, ds.classes)
    local x, y = ds:get(6)
    assert.are.same({ 3, 12, 12 }, x:size())
    assert.are.equal("int64", y:dtype())
    assert.are.equal(0, y:dim())
    assert.are.equal((6 - 1) % 4 + 1, y:item())
    local item = ds[6] -- ds[i] is {ds:get(i)}, as for the other datasets
    assert.are.same({ 3, 12, 12 }, item[1]:size())
    assert.are.equal(y:item(), item[2]:item())
    assert.are.equal(30, ds:len())
    -- PNG items are exactly the written pixels / 255
    local ref = map(planes(random_image(12, 12, 3, 5)), function(v) return v / 255 end)
    assert.is_true(max_diff(ds:get(5), ref) < 1e-7)
    local xb, yb = ds:get_batch { 5, 1, 30 }
    assert.are.same({ 3, 3, 12, 12 }, xb:size())
    assert.are.equal("float32", xb:dtype())
    assert.are.same({ (5 - 1) % 4 + 1, 1, (30 - 1) % 4 + 1 }, yb:totable())
    assert.is_true(max_diff(xb[1], ref) < 1e-7)
    -- indices may also come as an int64 tensor
    local xt = ds:get_batch(ddp.tensor { 5, 1, 30 })
    assert.is_true(same_tensor(xt, xb))
    ds:close()
  end)

  it("gives the same random transforms whatever the number of workers, prefetched or not", function()
    local batches = { { 1, 2, 3, 4, 5, 6, 7 }, { 8, 9, 10, 3, 11 }, { 12, 13, 1, 14 }, { 1, 2, 3, 4, 5, 6, 7 } }
    local function run(workers, prefetch)
      local ds = CSVImageDataset { csv = csv, transform = augment, num_workers = workers, seed = 9 }
      local out = {}
      if prefetch then ds:prefetch(batches[1]) end
      for k, b in ipairs(batches) do
        if prefetch and batches[k + 1] then ds:prefetch(batches[k + 1]) end -- the DataLoader's order
        out[k] = ds:get_batch(b)
      end
      local info = ds:info()
      ds:close()
      return out, info
    end
    local ref = run(0, false)
    assert.is_false(same_tensor(ref[1], ref[4])) -- a second load of the same items draws anew
    for _, workers in ipairs { 1, 3 } do
      for _, prefetch in ipairs { false, true } do
        local got, info = run(workers, prefetch)
        for k = 1, #batches do assert.is_true(same_tensor(ref[k], got[k])) end
        assert.are.equal(prefetch and #batches or 0, info.prefetch_hits)
      end
    end
    -- get(i) on one item equals the batch of that item under the same draw
    local a = CSVImageDataset { csv = csv, transform = augment, num_workers = 0, seed = 9 }
    local b = CSVImageDataset { csv = csv, transform = augment, num_workers = 2, seed = 9 }
    assert.is_true(same_tensor(a:get(4), b:get_batch({ 4 })[1]))
    -- set_epoch replays an epoch's transforms
    b:set_epoch(2)
    local e2 = b:get_batch(batches[1])
    b:get_batch(batches[1])
    b:set_epoch(2)
    assert.is_true(same_tensor(e2, b:get_batch(batches[1])))
    assert.is_false(same_tensor(e2, ref[1]))
    a:close()
    b:close()
  end)

  it("splits the rows into disjoint train/valid/test sets covering all of them", function()
    local big = make_dir()
    local lines = { "path,label" }
    for i = 1, 103 do lines[#lines + 1] = string.format("img%d.png,%d", i, i % 5) end
    write_text(big .. "/labels.csv", table.concat(lines, "\n"))
    local seen, sizes = {}, {}
    for _, split in ipairs { "train", "valid", "test" } do
      local ds = CSVImageDataset { csv = big .. "/labels.csv", split = split, seed = 4, transform = { T.Resize { 4, 4 },
        T.ToTensor() }, num_workers = 0 }
      sizes[#sizes + 1] = #ds
      for i = 1, #ds do
        local r = ds:row(i)
        assert.is_nil(seen[r])
        seen[r] = split
        assert.are.equal(r % 5 + 1, ds:label(i))
        assert.are.equal(big .. "/img" .. r .. ".png", ds:path(i))
      end
      ds:close()
    end
    -- random_split's rounding: floor(103 * {0.8, 0.1, 0.1}) = {82, 10, 10}, the remainder 1 to the first
    assert.are.same({ 83, 10, 10 }, sizes)
    for r = 1, 103 do assert.is_not_nil(seen[r]) end
    local function train_rows(seed, splits)
      local ds = CSVImageDataset { csv = big .. "/labels.csv", split = "train", seed = seed, splits = splits,
        transform = { T.Resize { 4, 4 }, T.ToTensor() }, num_workers = 0 }
      local rows = {}
      for i = 1, #ds do rows[i] = ds:row(i) end
      ds:close()
      return rows
    end
    assert.are.same(train_rows(4), train_rows(4))
    assert.are_not.same(train_rows(4), train_rows(5))
    assert.are.equal(52, #train_rows(4, { 0.5, 0.25, 0.25 })) -- floor(51.5) + the first of 2 left over
    io_util.rm_rf(big)
  end)

  it("numbers string labels by sorted class name and reads quoted CSV fields", function()
    local d = make_dir()
    image.write_png(d .. "/a,b.png", random_image(6, 6, 1, 1))
    image.write_png(d .. "/c.png", random_image(6, 6, 1, 2))
    write_text(d .. "/list.csv", 'file,kind\n"a,b.png",zebra\r\nc.png,"ant"\r\n')
    local ds = CSVImageDataset { csv = d .. "/list.csv", path_column = "file", label_column = "kind", channels = 1,
      num_workers = 1 }
    assert.are.same({ "ant", "zebra" }, ds.classes)
    local x, y = ds:get_batch { 1, 2 }
    assert.are.same({ 2, 1 }, y:totable())
    assert.are.same({ 2, 1, 6, 6 }, x:size())
    ds:close()
    io_util.rm_rf(d)
  end)

  it("resizes with size= and otherwise requires one image size, naming the odd row", function()
    local d = make_dir()
    local list = make_dataset(d, 6, { side = function(i) return i == 4 and 15 or 10 end, channels = 1 })
    local sized = CSVImageDataset { csv = list, size = { 7, 9 }, channels = 1, num_workers = 2 }
    assert.are.same({ 6, 1, 7, 9 }, sized:get_batch({ 1, 2, 3, 4, 5, 6 }):size())
    sized:close()
    local plain = CSVImageDataset { csv = list, channels = 1, num_workers = 2 }
    assert.are.same({ 1, 10, 10 }, plain.image_shape)
    local ok, err = pcall(plain.get_batch, plain, { 1, 4 })
    assert.is_false(ok)
    assert.matches(list .. ": row 4 (line 5): image '", err, 1, true)
    assert.matches("is 15x15 (HxW) after the transforms but this dataset's items are 10x10", err, 1, true)
    assert.are.same({ 1, 15, 15 }, plain:get(4):size()) -- one item may have its own size
    plain:close()
    io_util.rm_rf(d)
  end)

  describe("errors name the CSV file and row", function()
    local function err_of(f, ...)
      local ok, e = pcall(f, ...)
      assert.is_false(ok)
      return e
    end

    it("for a missing or corrupt image, when the batch needing it is loaded", function()
      local d = make_dir()
      local list = make_dataset(d, 8)
      os.remove(d .. "/img_004.png")
      local f = assert(io.open(d .. "/img_005.png", "rb"))
      local bytes = f:read("a")
      f:close()
      write_text(d .. "/img_005.png", bytes:sub(1, #bytes // 2))
      for _, workers in ipairs { 0, 2 } do
        local ds = CSVImageDataset { csv = list, transform = augment, num_workers = workers }
        ds:prefetch { 1, 4 }
        local e = err_of(ds.get_batch, ds, { 1, 4 })
        assert.matches(list .. ": row 4 (line 5): image '" .. d .. "/img_004.png': cannot open", e, 1, true)
        e = err_of(ds.get_batch, ds, { 2, 5, 4 })
        assert.matches(list .. ": row 5 (line 6): image '" .. d .. "/img_005.png': corrupt PNG data", e, 1, true)
        e = err_of(ds.get, ds, 4)
        assert.matches(list .. ": row 4 (line 5)", e, 1, true)
        assert.are.same({ 2, 3, 10, 8 }, ds:get_batch({ 1, 2 }):size()) -- the others still load
        ds:close()
      end
      io_util.rm_rf(d)
    end)

    it("for bad labels, missing columns and malformed rows, when the dataset is made", function()
      local d = make_dir()
      local function with(text) write_text(d .. "/l.csv", text) return d .. "/l.csv" end
      local list = d .. "/l.csv"
      local e = err_of(CSVImageDataset, { csv = with("path,label\na.png,0\nb.png,-1\n") })
      assert.matches(list .. ": row 2 (line 3): label '-1' in column 'label' is not a non-negative integer", e, 1, true)
      e = err_of(CSVImageDataset, { csv = with("path,label\na.png,0\nb.png,cat\n") })
      assert.matches("row 2 (line 3): label 'cat'", e, 1, true)
      e = err_of(CSVImageDataset, { csv = with("path,label\na.png,cat\n\nb.png,1.5\n") })
      assert.matches(list .. ": row 2 (line 4): label '1.5' in column 'label' is a number", e, 1, true)
      e = err_of(CSVImageDataset, { csv = with("path,label\na.png,cat\nb.png,\n") })
      assert.matches(list .. ": row 2 (line 3): empty label", e, 1, true)
      e = err_of(CSVImageDataset, { csv = with("path,target\na.png,1\n") })
      assert.matches("CSV file '" .. list .. "' has no column 'label' (its columns: path, target)", e, 1, true)
      e = err_of(CSVImageDataset, { csv = with("path,label\na.png,0\n,1\n") })
      assert.matches(list .. ": row 2 (line 3): empty image path", e, 1, true)
      e = err_of(CSVImageDataset, { csv = with("path,label\na.png,1\nb.png,2,3\n") })
      assert.matches("'" .. list .. "': row 2 (line 3) has 3 fields but the header has 2", e, 1, true)
      e = err_of(CSVImageDataset, { csv = d .. "/nope.csv" })
      assert.matches("nope.csv': cannot open", e, 1, true)
      io_util.rm_rf(d)
    end)

    it("for a label id the file cannot hold (it allocated one class name per possible id), naming the row", function()
      local d = make_dir()
      local function with(text) write_text(d .. "/l.csv", text) return d .. "/l.csv" end
      local list = d .. "/l.csv"
      local t0 = os.clock()
      local e = err_of(CSVImageDataset, { csv = with("path,label\na.png,0\nb.png,2147483648\nc.png,1\n") })
      assert.matches(list .. ": row 2 (line 3): label 2147483648 in column 'label' would make 2147483649 classes, " ..
        "more than the file's 3 rows", e, 1, true)
      assert.matches("pass num_classes = K", e, 1, true)
      e = err_of(CSVImageDataset, { csv = with("path,label\na.png,9223372036854775807\n") })
      assert.matches("row 1 (line 2): label 9223372036854775807 in column 'label' would make 2^63 classes", e, 1, true)
      e = err_of(CSVImageDataset, { csv = with("path,label\na.png,0\nb.png,10\n"), num_classes = 10 })
      assert.matches(list .. ": row 2 (line 3): label 10 in column 'label' is out of range for num_classes = 10 " ..
        "(class ids are 0..9)", e, 1, true)
      e = err_of(CSVImageDataset, { csv = with("path,label\na.png,cat\nb.png,dog\n"), num_classes = 3 })
      assert.matches("column 'label' names 2 classes but num_classes = 3", e, 1, true)
      assert.matches("num_classes must be an integer in 1..16777216",
        err_of(CSVImageDataset, { csv = list, num_classes = 1 << 30 }))
      assert.matches("num_classes must be an integer >= 1", err_of(CSVImageDataset, { csv = list, num_classes = 0 }))
      assert.is_true(os.clock() - t0 < 5, "the checks took " .. (os.clock() - t0) .. " s")
      -- more classes than rows is fine when num_classes says so
      local img = random_image(4, 4, 3, 1)
      image.write_png(d .. "/a.png", img)
      local ds = CSVImageDataset { csv = with("path,label\na.png,7\n"), num_classes = 10 }
      assert.are.equal(10, ds.num_classes)
      assert.are.equal(8, ds:label(1))
      ds:close()
      io_util.rm_rf(d)
    end)

    it("for a row naming a FIFO or a device: an error naming the row, not a decode worker blocked forever", function()
      local d = make_dir()
      image.write_png(d .. "/a.png", random_image(4, 4, 3, 1))
      assert.is_true(io_util.run("mkfifo " .. io_util.quote(d .. "/fifo")))
      write_text(d .. "/l.csv", "path,label\na.png,0\nfifo,1\n/dev/zero,0\na.png,1\n")
      write_text(d .. "/first.csv", "path,label\nfifo,0\n")
      -- in a child process with a deadline: a blocked reader is a failure, not a hung spec
      write_text(d .. "/s.lua", [[
local CSVImageDataset = require "ddplua.data.csv_image"
for _, workers in ipairs { 0, 2 } do
  local ds = CSVImageDataset { csv = "l.csv", num_workers = workers }
  print(workers, pcall(ds.get, ds, 2))
  print(workers, pcall(ds.get_batch, ds, { 4, 3 }))
  print(workers, ds:get_batch({ 1, 4 }):size(1))
  ds:close()
end
print(pcall(CSVImageDataset, { csv = "first.csv" }))
print(pcall(CSVImageDataset, { csv = "fifo" }))
]])
      local ok, out = io_util.run("cd " .. io_util.quote(d) .. " && timeout 30 " ..
        io_util.quote(io_util.abspath(io_util.ddplua)) .. " s.lua; echo rc=$?")
      assert.is_true(ok, out)
      assert.matches("rc=0\n", out, 1, true)
      for _, workers in ipairs { "0", "2" } do
        assert.matches(workers .. "\tfalse\t[^\n]*: l%.csv: row 2 %(line 3%): image '%./fifo': not a regular file " ..
          "%(it is a FIFO%)", out)
        assert.matches(workers .. "\tfalse\t[^\n]*: l%.csv: row 3 %(line 4%): image '/dev/zero': not a regular file " ..
          "%(it is a character device%)", out)
        assert.matches(workers .. "\t2\n", out, 1, true)
      end
      assert.matches("first.csv: row 1 (line 2): image './fifo': not a regular file (it is a FIFO)", out, 1, true)
      assert.matches("CSV file 'fifo': not a regular file (it is a FIFO)", out, 1, true)
      io_util.rm_rf(d)
    end)

    it("for bad options and indices", function()
      assert.matches("unknown option 'shuffle'", err_of(CSVImageDataset, { csv = csv, shuffle = true }))
      assert.matches("channels must be 1 or 3", err_of(CSVImageDataset, { csv = csv, channels = 2 }))
      assert.matches("split must be nil", err_of(CSVImageDataset, { csv = csv, split = "dev" }))
      assert.matches("add up to 0.9",
        err_of(CSVImageDataset, { csv = csv, split = "train", splits = { 0.7, 0.1, 0.1 } }))
      assert.matches("ToTensor%(%) is missing",
        err_of(CSVImageDataset, { csv = csv, transform = { T.Resize { 4, 4 } } }))
      assert.matches("entry 1 is a function",
        err_of(CSVImageDataset, { csv = csv, transform = { function(x) return x end } }))
      assert.matches("2 means/stds for images with 3 channels",
        err_of(CSVImageDataset, { csv = csv, transform = { T.ToTensor(), T.Normalize({ 1, 2 }, { 1, 1 }) } }))
      local ds = CSVImageDataset { csv = csv, num_workers = 1 }
      assert.matches("index 31 %(position 2 of the indices%) is out of range 1..30",
        err_of(ds.get_batch, ds, { 1, 31 }))
      assert.matches("index 0 %(position 1", err_of(ds.prefetch, ds, { 0 }))
      assert.matches("indices%[2%] must be an integer", err_of(ds.get_batch, ds, { 1, "x" }))
      assert.matches("index 0 is out of range 1..30", err_of(ds.get, ds, 0))
      ds:close()
      assert.matches("used after close", err_of(ds.get_batch, ds, { 1 }))
    end)
  end)

  it("shuts the workers down with prefetched work outstanding", function()
    local heavy = { T.Resize { 300, 300 }, T.RandomRotation(30), T.ToTensor() }
    do
      local ds <close> = CSVImageDataset { csv = csv, transform = heavy, num_workers = 3 }
      ds:prefetch { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 }
      ds:prefetch { 11, 12, 13, 14, 15, 16, 17, 18, 19, 20 }
    end -- closed here
    for _ = 1, 3 do -- and by the garbage collector
      local ds = CSVImageDataset { csv = csv, transform = heavy, num_workers = 2 }
      ds:prefetch { 21, 22, 23, 24, 25, 26, 27, 28, 29, 30 }
    end
    collectgarbage()
    collectgarbage()
    local ds = CSVImageDataset { csv = csv, transform = heavy, num_workers = 2 }
    ds:prefetch { 1, 2 }
    assert.are.same({ 2, 3, 300, 300 }, ds:get_batch({ 1, 2 }):size())
    ds:close()
  end)
end)
