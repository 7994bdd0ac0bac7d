-- Copies of permuted views into contiguous tensors (src/backends/cpu/cpu_copy_permute.c: tiled 2-D transposes
-- of the block between the source's unit-stride dim and the last dim, for every index of the other dims; a
-- short last dim interleaved directly), held element by element against the index arithmetic written here:
-- PixelShuffle's two permutations, channels-last, batches of transposes, narrowed views whose dims do not merge,
-- strips and tiles cut at both edges, whole rows moved when the last dim is kept (the attention heads' merge;
-- expanded, flipped and narrowed sources), 2-, 4- and 8-byte elements (bit for bit: NaN and -0 keep their bits), on
-- every kernel set with one thread and two.
local ddp = require "ddplua"
local R = require "helpers.ref"

-- base: a contiguous tensor of shape S; the view is base:permute(P), then narrowed along `cut` = {dim, start,
-- len} of the permuted view when given. Returns, for each element of the view in order, its flat index in base.
local function expected_index(S, P, cut)
  local n = #S
  local bstride = {}
  local s = 1
  for d = n, 1, -1 do
    bstride[d] = s
    s = s * S[d]
  end
  local vshape, vstride, off = {}, {}, 0
  for k = 1, n do
    vshape[k], vstride[k] = S[P[k]], bstride[P[k]]
  end
  if cut then
    off = (cut[2] - 1) * vstride[cut[1]]
    vshape[cut[1]] = cut[3]
  end
  local out, idx = {}, {}
  for k = 1, n do idx[k] = 0 end
  local total = 1
  for k = 1, n do total = total * vshape[k] end
  for _ = 1, total do
    local f = off
    for k = 1, n do f = f + idx[k] * vstride[k] end
    out[#out + 1] = f + 1
    for k = n, 1, -1 do
      idx[k] = idx[k] + 1
      if idx[k] < vshape[k] then break end
      idx[k] = 0
    end
  end
  return out, vshape
end

local CASES = { -- base shape, permutation, narrowing of the permuted view
  { { 2, 3, 2, 2, 5, 32 }, { 1, 2, 5, 3, 6, 4 } }, -- PixelShuffle(2) forward: a last dim of 2
  { { 2, 3, 5, 2, 32, 2 }, { 1, 2, 4, 6, 3, 5 } }, -- and its backward: the source's unit dim of size 2
  { { 2, 4, 3, 3, 7, 20 }, { 1, 2, 5, 3, 6, 4 } }, -- PixelShuffle(3): a last dim of 3
  { { 3, 17, 9, 11 }, { 1, 3, 4, 2 } }, -- NCHW -> NHWC: a last dim of 17 (partial tiles)
  { { 3, 9, 11, 17 }, { 1, 4, 2, 3 } }, -- NHWC -> NCHW
  { { 130, 70 }, { 2, 1 } }, -- a matrix: strips of 64 cut at 130
  { { 4, 40, 33 }, { 1, 3, 2 } }, -- a batch of transposes
  { { 4, 40, 33 }, { 3, 1, 2 } }, -- the unit dim in the middle of the destination
  { { 5, 12, 9 }, { 2, 3, 1 } }, -- a last dim of 5 (interleaved)
  { { 6, 50, 20 }, { 3, 2, 1 }, { 2, 3, 40 } }, -- narrowed: strides that do not merge
  { { 6, 10, 48 }, { 1, 3, 2 }, { 1, 2, 4 } }, -- narrowed outer dim
  { { 8, 12, 70 }, { 3, 1, 2 }, { 3, 2, 9 } }, -- narrowed last dim (9: one partial tile)
  { { 12, 10 }, { 2, 1 } }, -- below the kernel's size: the row loop, the same answer
  -- the last dim kept: whole rows gathered by an odometer (attention heads merged back)
  { { 3, 4, 20, 8 }, { 1, 3, 2, 4 } }, -- [B, H, T, D] -> [B, T, H, D]
  { { 2, 5, 3, 7, 16 }, { 4, 2, 1, 3, 5 } }, -- several outer dims wrapping at once
  { { 6, 5, 9, 12 }, { 2, 1, 3, 4 }, { 4, 3, 5 } }, -- narrowed last dim: rows shorter than their pitch
  { { 6, 5, 9, 12 }, { 2, 1, 3, 4 }, { 1, 2, 3 } }, -- narrowed outer dim
  { { 3, 2, 300 }, { 2, 1, 3 } }, -- rows of 600-2400 bytes: the kernel's (2 bytes) and the row loop's (8)
}

local DTYPES = { "float32", "float64", "bfloat16", "float16", "int64", "uint8" } -- uint8: the row loop

local function check_case(c, dtype, seed)
  local S, P, cut = c[1], c[2], c[3]
  local n = 1
  for _, v in ipairs(S) do n = n * v end
  local base
  if dtype == "int64" then
    base = ddp.arange(0, n, { dtype = "int64" }):mul(7919):remainder(30011):sub(15000)
  elseif dtype == "uint8" then
    base = ddp.arange(0, n, { dtype = "int64" }):mul(7919):remainder(251):to(dtype)
  else
    local t = R.randn({ n }, seed, 3):totable()
    t[1], t[2], t[n] = 0 / 0, -0.0, math.huge
    base = ddp.tensor(t, { dtype = "float64" }):to(dtype)
  end
  base = base:reshape(S)
  local view = base:permute(table.unpack(P))
  if cut then view = view:narrow(cut[1], cut[2], cut[3]) end
  local got = view:contiguous()
  local want_idx, vshape = expected_index(S, P, cut)
  assert.same(vshape, got:size())
  assert.is_true(got:is_contiguous())
  local g = got:reshape(-1):to((dtype == "int64" or dtype == "uint8") and "int64" or "float64"):totable()
  local b = base:reshape(-1):to((dtype == "int64" or dtype == "uint8") and "int64" or "float64"):totable()
  local what = dtype .. " " .. table.concat(S, "x") .. " permuted " .. table.concat(P, ",")
  for i, f in ipairs(want_idx) do
    local x, y = g[i], b[f]
    if not (x == y and 1 / x == 1 / y or (x ~= x and y ~= y)) then
      error(string.format("%s: element %d is %s, expected %s (base element %d)", what, i, x, y, f))
    end
  end
end

describe("copies of permuted views", function()
  R.describe_kernel_sets(_ENV, { 1, 2 }, function()
    for ci, c in ipairs(CASES) do
      it(table.concat(c[1], "x") .. " permuted " .. table.concat(c[2], ",") .. (c[3] and ", narrowed" or ""),
        function()
          for di, dtype in ipairs(DTYPES) do check_case(c, dtype, 100 * ci + di) end
        end)
    end

    it("large enough that the strips are split over the threads, with the result of a contiguous source", function()
      -- the same values copied through a source that needs no permutation (the row loop) agree exactly
      local x = R.randn({ 8, 64, 40, 40 }, 5, 1):float()
      local nhwc = x:permute(1, 3, 4, 2):contiguous()
      local back = nhwc:permute(1, 4, 2, 3):contiguous()
      assert.equal(0, back:ne(x):sum():item(), "NCHW -> NHWC -> NCHW")
      local ps = x:reshape({ 8, 16, 2, 2, 40, 40 }):permute(1, 2, 5, 3, 6, 4):contiguous()
      local un = ps:reshape({ 8, 16, 40, 2, 40, 2 }):permute(1, 2, 4, 6, 3, 5):contiguous():reshape({ 8, 64, 40, 40 })
      assert.equal(0, un:ne(x):sum():item(), "PixelShuffle there and back")
    end)
  end)

  it("copies rows of expanded, flipped and strided sources with the last dim kept as the cast's row loop does", function()
    -- a copy into another dtype takes the row loop; float32 -> float64 is exact, so both must agree bit for bit
    local base = R.randn({ 1, 6, 9, 24 }, 11, 1):float()
    local views = {
      base:expand(4, 6, 9, 24):permute(3, 1, 2, 4), -- an outer dim of stride 0
      base:flip(3):permute(1, 3, 2, 4), -- a negative outer stride
      base:flip(2):transpose(2, 3), -- both outer dims stepping backwards
      base:expand(5, 6, 9, 24):narrow(4, 3, 17):transpose(1, 3), -- expanded, narrowed rows
    }
    for i, v in ipairs(views) do
      local got = v:contiguous()
      assert.is_true(got:is_contiguous())
      assert.same(v:size(), got:size())
      assert.equal(0, got:double():ne(v:double()):sum():item(), "view " .. i)
    end
  end)

  it("matches PixelShuffle and its gradient in PyTorch", function()
    local TR = require "helpers.torch_ref"
    local x = R.randn({ 2, 18, 5, 7 }, 9, 1)
    local ref = TR.run([[
x = T['x'].clone().requires_grad_()
y = torch.nn.functional.pixel_shuffle(x, 3)
(y * torch.arange(y.numel(), dtype=y.dtype).reshape(y.shape)).sum().backward()
OUT['y'] = y; OUT['g'] = x.grad
]], { x = x })
    local xl = x:clone():requires_grad_()
    local y = ddp.nn.F.pixel_shuffle(xl, 3)
    local w = ddp.arange(0, y:numel(), { dtype = "float64" }):reshape(y:size())
    local loss = (y * w):sum()
    loss:backward()
    R.assert_close(y, R.from(ref.y), 0, 0, "pixel_shuffle")
    R.assert_close(xl.grad, R.from(ref.g), 0, 0, "pixel_shuffle gradient")
  end)
end)
