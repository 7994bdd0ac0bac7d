-- nansum, nanmean, std_mean, var_mean, aminmax, mode, cummax, cummin, logcumsumexp, diff, unique,
-- unique_consecutive, searchsorted, bucketize, histc, cdist, index_add(_), index_copy(_), index_fill(_),
-- masked_scatter, argwhere, cross (lua/ddplua/tensor_reduce_more.lua) against PyTorch 1.13: values and 1-based
-- positions (NaN, ties, empty tensors, negative dims, transposed inputs, integers), gradients (float32 and float64),
-- the in-place forms, the documented differences, and the errors.
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local TC = require "helpers.torch_cases"
local gc = require "helpers.gradcheck"

local NAN, INF = 0 / 0, math.huge
local NO_TORCH = "skipped: /usr/bin/python3 cannot import torch"

local same = R.assert_same_results

local function f64(v) return ddp.tensor(v, { dtype = "float64" }) end
local function i64(v) return ddp.tensor(v, { dtype = "int64" }) end

-- shared inputs: random values, NaN, ties (small integers as floats), integers, an empty tensor
local function inputs()
  ddp.manual_seed(7)
  local x = ddp.randn(3, 5, 7, { dtype = "float64" })
  local n = x:clone()
  n[3][2][5], n[1][4][1], n[1][4][3], n[2][1][7] = NAN, NAN, NAN, NAN
  local ti = ddp.randint(0, 3, { 4, 9 }):double() -- many ties
  local i = ddp.randint(-2, 3, { 4, 6 })
  return x, n, ti, i, ddp.zeros(0, 3, { dtype = "float64" })
end

describe("reductions, scans and indexing (tensor_reduce_more.lua)", function()
  it("nansum, nanmean, std_mean, var_mean, aminmax match PyTorch", function()
    if not TR.available() then return pending(NO_TORCH) end
    local x, n, _, i, e = inputs()
    local an = f64({ { NAN, NAN }, { 1, NAN } })
    local got = {
      ns = n:nansum(), ns2 = n:nansum(2), ns13 = n:nansum({ 1, 3 }, true), nsi = i:nansum(2), nse = e:nansum(1),
      nst = n:transpose(1, 3):nansum(-1), nsf = ddp.nansum(n:float(), 1), nsk = n:nansum(nil, true),
      nm = n:nanmean(), nm3 = n:nanmean(-1, true), nman = an:nanmean(2), nme = e:nanmean(1), nmt = n:transpose(2, 3):nanmean(2),
    }
    got.sm_s, got.sm_m = ddp.std_mean(x, 2)
    got.vm_s, got.vm_m = ddp.var_mean(x, { 1, 3 }, { correction = 0, keepdim = true })
    got.sa_s, got.sa_m = ddp.std_mean(x)
    got.vt_s, got.vt_m = ddp.var_mean(x:transpose(1, 2), -1, { unbiased = false })
    got.mm_a, got.mm_b = x:aminmax()
    got.mn_a, got.mn_b = n:aminmax({ dim = 2 })
    got.mi_a, got.mi_b = i:aminmax({ dim = -1, keepdim = true })
    got.mk_a, got.mk_b = ddp.aminmax(x, { keepdim = true })
    local ref = TR.run([==[
x, n, i, e, an = (T[k] for k in ("x", "n", "i", "e", "an"))
OUT.update(ns=n.nansum(), ns2=n.nansum(1), ns13=n.nansum((0, 2), keepdim=True), nsi=i.nansum(1), nse=e.nansum(0),
           nst=n.transpose(0, 2).nansum(-1), nsf=n.float().nansum(0), nsk=n.nansum((0, 1, 2), keepdim=True),
           nm=n.nanmean(), nm3=n.nanmean(-1, keepdim=True), nman=an.nanmean(1), nme=e.nanmean(0),
           nmt=n.transpose(1, 2).nanmean(1))
OUT["sm_s"], OUT["sm_m"] = torch.std_mean(x, 1)
OUT["vm_s"], OUT["vm_m"] = torch.var_mean(x, (0, 2), correction=0, keepdim=True)
OUT["sa_s"], OUT["sa_m"] = torch.std_mean(x)
OUT["vt_s"], OUT["vt_m"] = torch.var_mean(x.transpose(0, 1), -1, unbiased=False)
OUT["mm_a"], OUT["mm_b"] = torch.aminmax(x)
OUT["mn_a"], OUT["mn_b"] = torch.aminmax(n, dim=1)
OUT["mi_a"], OUT["mi_b"] = torch.aminmax(i, dim=-1, keepdim=True)
OUT["mk_a"], OUT["mk_b"] = torch.aminmax(x, keepdim=True)
]==], { x = x, n = n, i = i, e = e, an = an })
    same(got, ref, 1e-5)
  end)

  it("mode, cummax, cummin, logcumsumexp, diff match PyTorch, positions 1-based", function()
    if not TR.available() then return pending(NO_TORCH) end
    local x, n, ti, i, e = inputs()
    local big = f64({ { -1000, 0, 1000, -INF, 3 }, { -INF, -INF, 1, INF, 2 }, { 5, NAN, 1, 2, 3 } })
    local pre, app = i64({ { 9 }, { 8 }, { 7 }, { 6 } }), i64({ { 1, 2 }, { 3, 4 }, { 5, 6 }, { 7, 8 } })
    local got = {}
    local function two(key, a, b) got[key .. "_v"], got[key .. "_i"] = a, b end
    two("mo", ti:mode())
    two("mo1", i:mode(1))
    two("mot", ti:transpose(1, 2):mode(2, true))
    two("mox", x:mode(2))
    two("mo0", f64(2.5):mode())
    two("moe", e:mode(2))
    two("cx", n:cummax(3))
    two("cxt", ti:cummax(2))
    two("cn", ti:cummin(1))
    two("cni", i:cummin(-1))
    two("cxtr", x:transpose(1, 3):cummax(1))
    two("cnn", n:cummin(-1))
    two("cxe", e:cummax(1))
    two("cx0", f64(3):cummax(1))
    got.l = x:logcumsumexp(2)
    got.lb = big:logcumsumexp(2)
    got.lt = x:transpose(2, 3):logcumsumexp(-1)
    got.lf = x:float():logcumsumexp(3)
    got.le = e:logcumsumexp(1)
    got.d = x:diff()
    got.d2 = x:diff(2, 2)
    got.di = i:diff(1, 2, pre, app)
    got.dt = ddp.diff(x:transpose(1, 2), { n = 3, dim = 1 })
    got.d0 = x:diff(0)
    got.d9 = x:diff(9, 3)
    got.de = e:diff(1, 1)
    local ref = TR.run([==[
x, n, ti, i, e, big, pre, app = (T[k] for k in ("x", "n", "ti", "i", "e", "big", "pre", "app"))
def two(key, r):
    OUT[key + "_v"], OUT[key + "_i"] = r[0], r[1] + 1
two("mo", ti.mode()); two("mo1", i.mode(0)); two("mot", ti.transpose(0, 1).mode(1, keepdim=True)); two("mox", x.mode(1))
two("mo0", torch.tensor(2.5, dtype=torch.float64).mode()); two("moe", e.mode(1))
two("cx", n.cummax(2)); two("cxt", ti.cummax(1)); two("cn", ti.cummin(0)); two("cni", i.cummin(-1))
two("cxtr", x.transpose(0, 2).cummax(0)); two("cnn", n.cummin(-1)); two("cxe", e.cummax(0))
two("cx0", torch.tensor(3., dtype=torch.float64).cummax(0))
OUT.update(l=x.logcumsumexp(1), lb=big.logcumsumexp(1), lt=x.transpose(1, 2).logcumsumexp(-1),
           lf=x.float().logcumsumexp(2), le=e.logcumsumexp(0))
OUT.update(d=x.diff(), d2=x.diff(2, 1), di=i.diff(1, 1, pre, app), dt=torch.diff(x.transpose(0, 1), n=3, dim=0),
           d0=x.diff(0), d9=x.diff(9, 2), de=e.diff(1, 0))
]==], { x = x, n = n, ti = ti, i = i, e = e, big = big, pre = pre, app = app })
    same({ lf = got.lf }, { lf = ref.lf }, 2e-6)
    got.lf, ref.lf = nil, nil
    same(got, ref, 1e-12)
  end)

  it("mode: NaNs count as one value, the largest; the last position among equal values", function()
    local v, p = f64({ NAN, 1, NAN, 1, NAN }):mode()
    assert.is_true(v:item() ~= v:item())
    assert.are.equal(5, p:item())
    v, p = f64({ NAN, 1, 1, NAN, 2 }):mode() -- two NaNs and two 1s: the smaller value
    assert.are.equal(1, v:item())
    assert.are.equal(3, p:item())
    -- a long row (PyTorch's unstable sort may give another of the ties here; ddplua: the last)
    local vals = {}
    for k = 1, 39 do vals[k] = k % 3 end -- 1, 2, 0, 1, ...: each 13 times, the last 0 at 39
    local long = f64(vals)
    v, p = long:mode()
    assert.are.equal(0, v:item())
    assert.are.equal(39, p:item())
  end)

  it("unique and unique_consecutive match PyTorch: sorted values, 1-based inverse, counts, dims", function()
    if not TR.available() then return pending(NO_TORCH) end
    local _, _, ti, i, e = inputs()
    local rows = ddp.cat({ i, i:narrow(1, 2, 2), i:narrow(1, 1, 1) }, 1) -- [7, 6] with repeated rows
    local cols = rows:transpose(1, 2)
    local runs = i64({ 1, 1, 2, 2, 2, 3, 1, 1, -4, 3 })
    local rr = f64({ { 1, 2 }, { 1, 2 }, { 3, 4 }, { 1, 2 } })
    local got = {}
    local function three(key, a, b, c) got[key .. "_v"], got[key .. "_i"], got[key .. "_c"] = a, b, c end
    three("u", ddp.unique(ti, { return_inverse = true, return_counts = true }))
    got.u1 = ddp.unique(i)
    three("ut", ti:transpose(1, 2):unique({ return_inverse = true, return_counts = true }))
    three("ur", ddp.unique(rows, { dim = 1, return_inverse = true, return_counts = true }))
    three("uc", ddp.unique(cols, { dim = -1, return_inverse = true, return_counts = true }))
    three("ue", ddp.unique(e, { return_inverse = true, return_counts = true }))
    three("uc1", ddp.unique_consecutive(runs, { return_inverse = true, return_counts = true }))
    three("uc2", rr:unique_consecutive({ dim = 1, return_inverse = true, return_counts = true }))
    three("uc3", ddp.unique_consecutive(ti, { return_inverse = true, return_counts = true }))
    got.un = ddp.unique(f64({ 1, NAN, 2, NAN, 1 }))
    got.uf = ddp.unique(ti:float(), { sorted = false })
    local ref = TR.run([==[
ti, i, e, rows, cols, runs, rr = (T[k] for k in ("ti", "i", "e", "rows", "cols", "runs", "rr"))
def three(key, r):
    OUT[key + "_v"], OUT[key + "_i"], OUT[key + "_c"] = r[0], r[1] + 1, r[2]
three("u", torch.unique(ti, return_inverse=True, return_counts=True))
OUT["u1"] = torch.unique(i)
three("ut", ti.transpose(0, 1).unique(return_inverse=True, return_counts=True))
three("ur", torch.unique(rows, dim=0, return_inverse=True, return_counts=True))
three("uc", torch.unique(cols, dim=-1, return_inverse=True, return_counts=True))
three("ue", torch.unique(e, return_inverse=True, return_counts=True))
three("uc1", torch.unique_consecutive(runs, return_inverse=True, return_counts=True))
three("uc2", rr.unique_consecutive(dim=0, return_inverse=True, return_counts=True))
three("uc3", torch.unique_consecutive(ti, return_inverse=True, return_counts=True))
OUT["un"] = torch.unique(torch.tensor([1, float("nan"), 2, float("nan"), 1], dtype=torch.float64))
OUT["uf"] = torch.unique(ti.float(), sorted=True)
]==], { ti = ti, i = i, e = e, rows = rows, cols = cols, runs = runs, rr = rr })
    same(got, ref)
    -- NaN: each a value of its own, with inverse and counts that add up (PyTorch 1.13's are broken there)
    local v, inv, cnt = ddp.unique(f64({ 1, NAN, 2, NAN, 1 }), { return_inverse = true, return_counts = true })
    assert.are.equal(4, v:numel())
    assert.are.same({ 1, 3, 2, 4, 1 }, inv:totable())
    assert.are.same({ 2, 1, 1, 1 }, cnt:totable())
    -- no gradient, as PyTorch's
    assert.is_false(ddp.unique(ti:clone():requires_grad_()).requires_grad)
  end)

  it("searchsorted, bucketize and histc match PyTorch (insertion positions 1..N+1)", function()
    if not TR.available() then return pending(NO_TORCH) end
    local x = inputs()
    local seq = f64({ 1, 2, 2, 3, 5 })
    local vals = f64({ { 0, 1, 2, 2.5, 5, 6 }, { NAN, 3, -INF, INF, 2, 4.5 } })
    local bseq = f64({ { 1, 3, 5, 7 }, { 2, 2, 4, 4 } })
    local bval = f64({ { 0, 3, 8 }, { 2, 4, 3 } })
    local unsorted, sorter = f64({ 5, 1, 3, 2 }), i64({ 2, 4, 3, 1 })
    local hv = f64({ 0, 0.5, 1, 1.5, 2, 3, -1, NAN })
    local got = {
      s = ddp.searchsorted(seq, vals), sr = ddp.searchsorted(seq, vals, { right = true }),
      ss = ddp.searchsorted(seq, vals, { side = "right" }), si = ddp.searchsorted(seq, i64({ 0, 2, 9 })),
      sif = ddp.searchsorted(i64({ 1, 3, 5 }), f64({ 2.5, 3 })), sb = ddp.searchsorted(bseq, bval),
      sbr = ddp.searchsorted(bseq, bval, { right = true }), sn = ddp.searchsorted(seq, 2),
      sst = ddp.searchsorted(unsorted, f64({ 0, 2.5, 9 }), { sorter = sorter }),
      se = ddp.searchsorted(seq, ddp.zeros(0, { dtype = "float64" })), s0 = ddp.searchsorted(ddp.zeros(0, { dtype = "float64" }), vals),
      st = ddp.searchsorted(seq, vals:transpose(1, 2)),
      b = ddp.bucketize(vals, seq), br = ddp.bucketize(vals, seq, { right = true }), bn = ddp.bucketize(2.5, seq),
      h = ddp.histc(x, 10), h2 = x:histc(5, -1, 1), hf = ddp.histc(x:float(), 7, -0.5, 2), hv = ddp.histc(hv, 4, 0, 2),
      he = ddp.histc(ddp.zeros(0), 3), hc = ddp.histc(f64({ 2, 2 }), 4), ht = ddp.histc(x:transpose(1, 3), 6),
    }
    local ref = TR.run([==[
x, seq, vals, bseq, bval, unsorted, sorter, hv = (T[k] for k in ("x", "seq", "vals", "bseq", "bval", "unsorted", "sorter", "hv"))
ss = torch.searchsorted
OUT.update(s=ss(seq, vals) + 1, sr=ss(seq, vals, right=True) + 1, ss=ss(seq, vals, side="right") + 1,
           si=ss(seq, torch.tensor([0, 2, 9])) + 1, sif=ss(torch.tensor([1, 3, 5]), torch.tensor([2.5, 3.], dtype=torch.float64)) + 1,
           sb=ss(bseq, bval) + 1, sbr=ss(bseq, bval, right=True) + 1, sn=ss(seq, 2) + 1,
           sst=ss(unsorted, torch.tensor([0, 2.5, 9], dtype=torch.float64), sorter=sorter - 1) + 1,
           se=ss(seq, torch.zeros(0, dtype=torch.float64)) + 1, s0=ss(torch.zeros(0, dtype=torch.float64), vals) + 1,
           st=ss(seq, vals.transpose(0, 1).contiguous()) + 1,
           b=torch.bucketize(vals, seq) + 1, br=torch.bucketize(vals, seq, right=True) + 1,
           bn=torch.bucketize(2.5, seq) + 1,
           h=torch.histc(x, 10), h2=x.histc(5, -1, 1), hf=torch.histc(x.float(), 7, -0.5, 2),
           hv=torch.histc(hv[:-1], 4, 0, 2), he=torch.histc(torch.zeros(0), 3),
           hc=torch.histc(torch.tensor([2., 2.], dtype=torch.float64), 4), ht=torch.histc(x.transpose(0, 2), 6))
]==], { x = x, seq = seq, vals = vals, bseq = bseq, bval = bval, unsorted = unsorted, sorter = sorter, hv = hv })
    -- hv: PyTorch 1.13 counts a NaN in the first bin; ddplua leaves it out (compared without it)
    same(got, ref)
  end)

  it("index_add / index_copy / index_fill, masked_scatter, argwhere, cross match PyTorch (values, integers)", function()
    if not TR.available() then return pending(NO_TORCH) end
    local x, _, _, i = inputs()
    local idx = i64({ 3, 1, 3 })
    local src = ddp.randn(3, 5, 7, { dtype = "float64" })
    local isrc = i64({ { 1, 2, 3, 4, 5, 6 }, { 10, 20, 30, 40, 50, 60 } })
    local mask = x:narrow(1, 1, 1):gt(0)
    local a, b = ddp.randn(4, 3, 2, { dtype = "float64" }), ddp.randn(1, 3, 2, { dtype = "float64" })
    local got = {
      ia = x:index_add(1, idx, src), iaa = x:index_add(1, idx, src, { alpha = -2.5 }),
      iat = x:transpose(1, 3):index_add(3, idx, src:transpose(1, 3)), iai = i:index_add(1, i64({ 4, 4 }), isrc, 3),
      ic = x:index_copy(1, i64({ 3, 1 }), src:narrow(1, 1, 2)), ici = i:index_copy(-2, i64({ 2 }), isrc:narrow(1, 1, 1)),
      ifl = x:index_fill(2, i64({ 5, 1, 5 }), -7.5), ifi = i:index_fill(2, i64({ 6 }), 9), ifn = x:index_fill(3, i64({}), 1),
      ms = x:masked_scatter(mask, src), msi = i:masked_scatter(i:gt(0), ddp.arange(100, 124)),
      ms0 = x:masked_scatter(x:gt(100), src),
      aw = i:argwhere(), awx = x:gt(1):argwhere(), aw0 = ddp.argwhere(f64(0)),
      cr = ddp.cross(a, b, 2), crd = ddp.cross(a:transpose(1, 2), b:transpose(1, 2)), crn = a:cross(b, -2),
      cri = ddp.cross(i64({ { 1, 2, 3 } }), i64({ { 4, 5, 6 } }), 2),
    }
    local ref = TR.run([==[
x, i, idx, src, isrc, mask, a, b = (T[k] for k in ("x", "i", "idx", "src", "isrc", "mask", "a", "b"))
mask = mask.bool()
idx = idx - 1
OUT.update(ia=x.index_add(0, idx, src), iaa=x.index_add(0, idx, src, alpha=-2.5),
           iat=x.transpose(0, 2).index_add(2, idx, src.transpose(0, 2)),
           iai=i.index_add(0, torch.tensor([3, 3]), isrc, alpha=3),
           ic=x.index_copy(0, torch.tensor([2, 0]), src[0:2]), ici=i.index_copy(-2, torch.tensor([1]), isrc[0:1]),
           ifl=x.index_fill(1, torch.tensor([4, 0, 4]), -7.5), ifi=i.index_fill(1, torch.tensor([5]), 9),
           ifn=x.index_fill(2, torch.tensor([], dtype=torch.long), 1),
           ms=x.masked_scatter(mask, src), msi=i.masked_scatter(i > 0, torch.arange(100, 124)),
           ms0=x.masked_scatter(x > 100, src),
           aw=i.argwhere() + 1, awx=(x > 1).argwhere() + 1, aw0=torch.argwhere(torch.tensor(0.)) + 1,
           cr=torch.cross(a, b, 1), crd=torch.cross(a.transpose(0, 1), b.transpose(0, 1)), crn=a.cross(b, -2),
           cri=torch.cross(torch.tensor([[1, 2, 3]]), torch.tensor([[4, 5, 6]]), 1))
]==], { x = x, i = i, idx = idx, src = src, isrc = isrc, mask = mask, a = a, b = b })
    same(got, ref, 1e-12)
  end)

  it("gradients match PyTorch (float32 and float64)", function()
    if not TR.available() then return pending(NO_TORCH) end
    local function t12(t) return t:transpose(1, 2) end
    local nan_in = R.randn({ 4, 5 }, 30)
    nan_in[2][3], nan_in[4][1], nan_in[4][2] = NAN, NAN, NAN
    local ties = ddp.tensor({ { 1, 3, 3, 2, 3, 1 }, { 2, 2, 0, 0, 5, 5 }, { 4, 1, 1, 4, 4, 1 } }, { dtype = "float64" })
    local same_pts = R.randn({ 4, 3 }, 31)
    local n = TC.check_cases(TC.both_dtypes(function()
      return {
        { "nansum(2) with NaN", inputs = { { "x", nan_in, grad = true } },
          lua = function(I) return I.x:nansum(2) end, py = "out = I['x'].nansum(1)" },
        { "nanmean({1, 2}, true) with NaN, transposed", inputs = { { "x", nan_in, view = t12, grad = true } },
          lua = function(I) return I.x:nanmean({ 1, 2 }, true) end, py = "out = I['x'].nanmean((0, 1), keepdim=True)" },
        { "std_mean(x, 1) as std + 2 mean", inputs = { { "x", R.randn({ 5, 3 }, 32), grad = true } },
          lua = function(I) local s, m = ddp.std_mean(I.x, 1); return s + m * 2 end,
          py = "s, m = torch.std_mean(I['x'], 0)\nout = s + m * 2" },
        { "var_mean(x, -1, correction 0) as var - mean", inputs = { { "x", R.randn({ 3, 6 }, 33), grad = true } },
          lua = function(I) local v, m = ddp.var_mean(I.x, -1, { correction = 0 }); return v - m end,
          py = "v, m = torch.var_mean(I['x'], -1, correction=0)\nout = v - m" },
        { "mode(2) values with ties", inputs = { { "x", ties, grad = true } },
          lua = function(I) return (I.x:mode(2)) end, py = "out = I['x'].mode(1)[0]" },
        { "cummax(2) with ties", inputs = { { "x", ties, grad = true } },
          lua = function(I) return (I.x:cummax(2)) end, py = "out = I['x'].cummax(1)[0]" },
        { "cummin(1) transposed", inputs = { { "x", R.randn({ 6, 4 }, 34), view = t12, grad = true } },
          lua = function(I) return (I.x:cummin(1)) end, py = "out = I['x'].cummin(0)[0]" },
        { "logcumsumexp(-1) on [3, 11]", inputs = { { "x", R.randn({ 3, 11 }, 35, 4), grad = true } },
          lua = function(I) return I.x:logcumsumexp(-1) end, py = "out = I['x'].logcumsumexp(-1)" },
        { "logcumsumexp(1) with large values", inputs = { { "x", ddp.tensor({ { -1000, 5 }, { 0, -3 }, { 1000, 2 } },
          { dtype = "float64" }), grad = true } },
          lua = function(I) return I.x:logcumsumexp(1) end, py = "out = I['x'].logcumsumexp(0)" },
        { "diff(2, 1, prepend, append)", inputs = { { "x", R.randn({ 4, 3 }, 36), grad = true },
          { "p", R.randn({ 1, 3 }, 37), grad = true }, { "a", R.randn({ 2, 3 }, 38), grad = true } },
          lua = function(I) return I.x:diff(2, 1, I.p, I.a) end, py = "out = I['x'].diff(2, 0, I['p'], I['a'])" },
        { "cdist p=2 small (direct)", inputs = { { "a", R.randn({ 2, 4, 3 }, 39), grad = true },
          { "b", R.randn({ 2, 5, 3 }, 40), grad = true } },
          lua = function(I) return ddp.cdist(I.a, I.b) end, py = "out = torch.cdist(I['a'], I['b'])" },
        { "cdist p=2 large (matmul identity), broadcast batch", inputs = { { "a", R.randn({ 1, 30, 4 }, 41), grad = true },
          { "b", R.randn({ 2, 7, 4 }, 42), grad = true } },
          lua = function(I) return ddp.cdist(I.a, I.b) end, py = "out = torch.cdist(I['a'], I['b'])" },
        { "cdist p=2 at zero distance, both modes", inputs = { { "a", same_pts, grad = true }, { "b", same_pts, grad = true } },
          lua = function(I)
            return ddp.cdist(I.a, I.b) + ddp.cdist(I.a, I.b, { p = 2, compute_mode = "use_mm_for_euclid_dist" })
          end,
          py = "out = torch.cdist(I['a'], I['b']) + torch.cdist(I['a'], I['b'], compute_mode='use_mm_for_euclid_dist')" },
        { "cdist p=1, 3, inf, 0 with a zero distance", inputs = { { "a", same_pts, grad = true },
          { "b", R.randn({ 2, 3 }, 43), grad = true } },
          lua = function(I)
            local b = ddp.cat({ I.a:narrow(1, 1, 1), I.b }, 1)
            return ddp.cdist(I.a, b, 1) + ddp.cdist(I.a, b, 3) + ddp.cdist(I.a, b, math.huge) + ddp.cdist(I.a, b, 0)
          end,
          py = "b = torch.cat([I['a'][0:1], I['b']], 0)\nout = torch.cdist(I['a'], b, 1) + torch.cdist(I['a'], b, 3) + " ..
            "torch.cdist(I['a'], b, float('inf')) + torch.cdist(I['a'], b, 0)" },
        { "index_add(2, [3, 1, 3], src, alpha 0.5)", inputs = { { "x", R.randn({ 2, 4 }, 44), grad = true },
          { "s", R.randn({ 2, 3 }, 45), grad = true } },
          lua = function(I) return I.x:index_add(2, ddp.tensor({ 3, 1, 3 }), I.s, { alpha = 0.5 }) end,
          py = "out = I['x'].index_add(1, torch.tensor([2, 0, 2]), I['s'], alpha=0.5)" },
        { "index_copy(1, [3, 1], src) transposed", inputs = { { "x", R.randn({ 3, 4 }, 46), view = t12, grad = true },
          { "s", R.randn({ 2, 3 }, 47), grad = true } },
          lua = function(I) return I.x:index_copy(1, ddp.tensor({ 3, 1 }), I.s) end,
          py = "out = I['x'].index_copy(0, torch.tensor([2, 0]), I['s'])" },
        { "index_fill(-1, [2], 0-dim tensor)", inputs = { { "x", R.randn({ 3, 4 }, 48), grad = true },
          { "v", R.randn({}, 49), grad = true } },
          lua = function(I) return I.x:index_fill(-1, ddp.tensor({ 2, 4 }), I.v) end,
          py = "out = I['x'].index_fill(-1, torch.tensor([1, 3]), I['v'])" },
        { "masked_scatter with a broadcast mask", inputs = { { "x", R.randn({ 3, 4 }, 50), grad = true },
          { "s", R.randn({ 20 }, 51), grad = true } },
          lua = function(I) return I.x:masked_scatter(ddp.tensor({ 1, 0, 1, 1 }):byte(), I.s) end,
          py = "out = I['x'].masked_scatter(torch.tensor([True, False, True, True]), I['s'])" },
        { "cross(a, b) default dim, broadcast", inputs = { { "a", R.randn({ 3, 4 }, 52), grad = true },
          { "b", R.randn({ 3, 1 }, 53), grad = true } },
          lua = function(I) return ddp.cross(I.a, I.b) end, py = "out = torch.cross(I['a'], I['b'])" },
      }
    end))
    assert.are.equal(38, n)
  end)

  it("aminmax's gradient is amin's and amax's (PyTorch 1.13 has none)", function()
    local x = ddp.tensor({ { 1, 3, 3 }, { 2, 0, 0 } }, { dtype = "float64" }):requires_grad_()
    local lo, hi = x:aminmax({ dim = 2 })
    ;(lo + hi * 10):sum():backward()
    assert.are.same({ { 1, 5, 5 }, { 10, 0.5, 0.5 } }, x.grad:totable())
  end)

  it("the in-place forms: values as the out-of-place ones, no autograd (as scatter_)", function()
    local base = R.randn({ 4, 3 }, 60)
    local src = R.randn({ 2, 3 }, 61)
    local idx = ddp.tensor({ 4, 2 })
    local a = base:clone()
    assert.are.equal(a, a:index_add_(1, idx, src, 2))
    assert.is_true(a:equal(base:index_add(1, idx, src, 2)))
    local b = base:clone():transpose(1, 2) -- a non-contiguous view, written through
    b:index_copy_(2, idx, src:transpose(1, 2))
    assert.is_true(b:equal(base:index_copy(1, idx, src):transpose(1, 2)))
    local c = base:clone()
    c:index_fill_(2, ddp.tensor({ 3, 3 }), -1)
    assert.is_true(c:equal(base:index_fill(2, ddp.tensor({ 3 }), -1)))
    local g = base:clone():requires_grad_()
    R.assert_error(function() g:index_add_(1, idx, src) end, "index_add_", "requires grad")
    R.assert_error(function() g:index_fill_(1, idx, 0) end, "index_fill_", "requires grad")
    ddp.no_grad(function() g:index_copy_(1, idx, src) end)
    assert.is_true(g:detach():equal(base:index_copy(1, idx, src)))
  end)

  it("bad arguments name the function and what was expected", function()
    local x = R.randn({ 3, 4 }, 70)
    local i = ddp.tensor({ 1, 2 })
    R.assert_error(function() x:nansum(3) end, "nansum", "out of range")
    R.assert_error(function() ddp.tensor({ 1, 2 }):nanmean() end, "nanmean", "floating-point")
    R.assert_error(function() ddp.std_mean(x, 1, { unbiased = true, correction = 1 }) end, "std_mean", "not both")
    R.assert_error(function() ddp.var_mean(x, 1, { bias = true }) end, "var_mean", "unknown option 'bias'")
    R.assert_error(function() ddp.zeros(0):aminmax() end, "aminmax", "empty")
    R.assert_error(function() ddp.zeros(2, 0):aminmax({ dim = 2 }) end, "aminmax", "size 0")
    R.assert_error(function() ddp.zeros(0):mode() end, "mode", "size 0")
    R.assert_error(function() x:cummax() end, "cummax", "expected dim")
    R.assert_error(function() x:cummin(-3) end, "cummin", "out of range")
    R.assert_error(function() i:logcumsumexp(1) end, "logcumsumexp", "floating-point")
    R.assert_error(function() x:diff(-1) end, "diff", "non-negative")
    R.assert_error(function() ddp.tensor(1.0):diff() end, "diff", "at least one dimension")
    R.assert_error(function() x:diff(1, 2, ddp.zeros(3)) end, "diff", "prepend", "shape")
    R.assert_error(function() ddp.unique(x, { sorted = 1 }) end, "unique", "sorted must be a boolean")
    R.assert_error(function() ddp.unique(ddp.zeros(3, 0), { dim = 1 }) end, "unique", "empty")
    R.assert_error(function() ddp.unique_consecutive(x, { sorted = true }) end, "unique_consecutive", "unknown option")
    R.assert_error(function() ddp.searchsorted(ddp.zeros(2, 3), ddp.zeros(3, 1)) end, "searchsorted", "all dims but the last")
    R.assert_error(function() ddp.searchsorted(ddp.zeros(3), ddp.zeros(2), { out_int32 = true }) end, "searchsorted",
      "int32")
    R.assert_error(function() ddp.searchsorted(ddp.zeros(3), ddp.zeros(2), { side = "left", right = true }) end,
      "searchsorted", "opposites")
    R.assert_error(function() ddp.searchsorted(ddp.zeros(3), "a") end, "searchsorted", "values")
    R.assert_error(function() ddp.bucketize(ddp.zeros(3), ddp.zeros(2, 2)) end, "bucketize", "1-D")
    R.assert_error(function() ddp.histc(i) end, "histc", "floating-point")
    R.assert_error(function() ddp.histc(x, 0) end, "histc", "bins")
    R.assert_error(function() ddp.histc(x, 3, 2, 1) end, "histc", "max must be larger")
    R.assert_error(function() ddp.histc(f64({ 1, NAN })) end, "histc", "not finite")
    R.assert_error(function() ddp.cdist(ddp.zeros(3), ddp.zeros(3)) end, "cdist", "at least 2 dims")
    R.assert_error(function() ddp.cdist(ddp.zeros(2, 3), ddp.zeros(2, 4)) end, "cdist", "columns")
    R.assert_error(function() ddp.cdist(ddp.zeros(2, 3), ddp.zeros(2, 3), -1) end, "cdist", "non-negative")
    R.assert_error(function() ddp.cdist(i:view(1, 2), i:view(1, 2)) end, "cdist", "floating-point")
    R.assert_error(function() ddp.cdist(ddp.zeros(2, 2, 3), ddp.zeros(3, 2, 3)) end, "cdist", "broadcast")
    R.assert_error(function() x:index_add(1, ddp.tensor({ 4 }), ddp.zeros(1, 4, { dtype = "float64" })) end, "index_add",
      "out of range", "1-based")
    R.assert_error(function() x:index_add(1, ddp.tensor({ 0 }), ddp.zeros(1, 4, { dtype = "float64" })) end, "index_add",
      "out of range")
    R.assert_error(function() x:index_add(1, ddp.tensor({ 1.0 }), ddp.zeros(1, 4, { dtype = "float64" })) end,
      "index_add", "int64")
    R.assert_error(function() x:index_add(1, i, ddp.zeros(2, 4)) end, "index_add", "dtype")
    R.assert_error(function() x:index_add(1, i, ddp.zeros(2, 3, { dtype = "float64" })) end, "index_add", "shape [2, 4]")
    R.assert_error(function() ddp.zeros(3, { dtype = "int64" }):index_add(1, i, ddp.zeros(2, { dtype = "int64" }), 1.5) end,
      "index_add", "alpha")
    R.assert_error(function() x:index_copy(3, i, x) end, "index_copy", "out of range")
    R.assert_error(function() x:index_fill(1, i, "a") end, "index_fill", "number or a 0-dim tensor")
    R.assert_error(function() x:masked_scatter(x:gt(0):long(), x) end, "masked_scatter", "uint8")
    R.assert_error(function() x:masked_scatter(x:gt(-100), ddp.zeros(5, { dtype = "float64" })) end, "masked_scatter",
      "selects 12", "only 5")
    R.assert_error(function() x:masked_scatter(ddp.ones(3):byte(), x) end, "masked_scatter", "broadcast")
    R.assert_error(function() ddp.cross(ddp.zeros(2, 4), ddp.zeros(2, 4)) end, "cross", "no dim of size 3")
    R.assert_error(function() ddp.cross(x, x, 2) end, "cross", "size 3")
    R.assert_error(function() ddp.argwhere(5) end, "argwhere", "expected a tensor")
  end)
end)
