-- Integer and number arguments at their extremes (math.maxinteger, math.mininteger, 1e300, NaN) to the ops that take
-- sizes, strides, counts, positions and diagonals: each call either returns what PyTorch's would (a stride past
-- the input is one window) or raises a Lua error naming the op; none may overflow (this spec runs under
-- UBSan in `make test`), loop over the positions of an output that cannot exist, or exhaust the process.
-- These found, on 2026-12-07: max_pool2d with a stride of math.maxinteger saving an index outside its plane (its
-- backward then failed), im2col's, repeat's, tril's, chunk's, split's and gather's index arithmetic overflowing,
-- interpolate and adaptive_max_pool2d looping over 2^63 output positions, an allocation of 16 TB aborting the
-- ASan build, randint's widest range overflowing, nn.LSTM wrapping its gate sizes negative or making layers until
-- killed, DistributedSampler building a padded order of 2^63 positions, DataLoader's batch count wrapping to none,
-- random_split's lengths summing around math.maxinteger, and tensor() storing 1e300 or NaN into int64 (C leaves that
-- conversion undefined; PyTorch refuses it).
local ddp = require "ddplua"
local R = require "helpers.ref"
local F = ddp.nn.F

local big, small = math.maxinteger, math.mininteger
local function i64(list) return ddp.tensor(list, { dtype = "int64" }) end

describe("extreme arguments", function()
  local x, v, m = ddp.randn(2, 3, 6, 6), ddp.randn(10), ddp.randn(4, 5)

  it("are refused with the op's name", function()
    local cases = {
      { function() return F.interpolate(x, { size = { big, 2 } }) end, "F.interpolate: the output" },
      { function() return F.interpolate(x, { scale_factor = 1e300 }) end, "not an integer" },
      { function() return F.interpolate(x, { scale_factor = 0 / 0 }) end, "scale_factor must be a positive" },
      { function() return F.adaptive_max_pool2d(x, { big, 2 }) end, "adaptive_max_pool2d: the output" },
      { function() return F.adaptive_avg_pool2d(x, { big, 2 }) end, "too large" },
      { function() return F.pad(x, { big, 0 }) end, "F.pad" },
      { function() return F.pad(x, { small, 0 }) end, "F.pad" },
      { function() return v:topk(big) end, "topk" },
      { function() return v:narrow(1, big, 2) end, "narrow" },
      { function() return v:narrow(1, 2, big) end, "narrow" },
      { function() return v:repeat_(big) end, "repeat" },
      { function() return v:repeat_(big // 2, 3) end, "too large" },
      { function() return v:expand(big, 10) end, "expand" },
      { function() return ddp.arange(0, big) end, "arange" },
      { function() return ddp.arange(0, 1, 1e-300) end, "arange" },
      { function() return ddp.zeros(big, big) end, "too large" },
      { function() return ddp.empty(1 << 42) end, "out of memory" }, -- 16 TB: more than the machine has
      { function() return v:unfold(1, big, 1) end, "unfold" },
      { function() return v:kthvalue(big) end, "kthvalue" },
      { function() return ddp.randperm(big) end, "too large" },
      { function() return F.one_hot(i64({ 1, 2 }), big) end, "too large" },
      { function() return F.pixel_shuffle(x, big) end, "too large" },
      { function() return F.conv1d(ddp.randn(1, 2, 9), ddp.randn(2, 2, 3), nil, 1, big) end, "conv2d" },
      { function() return ddp.conv2d(x, ddp.randn(3, 3, 3, 3), nil, 1, 1, { big, 1 }) end, "conv2d" },
      { function() return ddp.conv_transpose2d(x, ddp.randn(3, 3, 3, 3), nil, 2, big) end, "conv_transpose2d" },
      { function() return v:chunk(0) end, "chunk" },
      { function() return v:split({ 5, big, big }) end, "split: the sections up to 2 sum to more" },
      { function() return ddp.linspace(0, 1, big) end, "" },
      { function() return v:index_select(1, i64({ big })) end, "out of range" },
      { function() return v:gather(1, i64({ small })) end, "gather: index -9223372036854775808" },
      { function() return m:scatter(1, i64({ { small } }), 1.0) end, "scatter" },
      { function() return F.embedding(i64({ big }), m) end, "embedding" },
      { function() return v:sum(big) end, "sum" },
      { function() return v:movedim(1, small) end, "movedim" },
      { function() return F.unfold(x, { 2, 2 }, { big, 1 }) end, "unfold" },
      { function() return F.unfold(x, 2, 1, big // 4) end, "unfold" },
      { function() return F.fold(ddp.randn(1, 4, 4), { big, 3 }, 2) end, "fold" },
      { function() return F.fold(ddp.randn(1, 4, 4), { big, big }, 1) end, "fold: output_size" },
      { function() return m:quantile(0 / 0) end, "quantile" },
      { function() return m:norm(0 / 0) end, "norm" },
      { function() return ddp.nn.LSTM(4, big) end, "LSTM: 1 layers of hidden_size 9223372036854775807" },
      { function() return ddp.nn.LSTM(4, 4, { num_layers = big }) end, "are too many weights" },
      { function() return ddp.nn.GRU(4, 1 << 30) end, "are too many weights" },
      { function() return ddp.data.DistributedSampler(ddp.data.TensorDataset(m), { num_replicas = big, rank = 0 }) end,
        "num_replicas 9223372036854775807 is more than" },
      { function() return ddp.tensor({ 1e300 }, { dtype = "int64" }) end,
        "tensor(): value 1e+300 cannot be converted to type int64 without overflow" },
      { function() return ddp.tensor({ { 1, 0 / 0 } }, { dtype = "int64" }) end, "cannot be converted to type int64" },
      { function() return ddp.tensor({ 300 }, { dtype = "uint8" }) end, "value 300 cannot be converted to type uint8" },
      { function() return ddp.tensor(-1, { dtype = "uint8" }) end, "cannot be converted to type uint8" },
      { function() return ddp.data.random_split(ddp.data.TensorDataset(m), { big, 1 }) end,
        "random_split: length 1 is 9223372036854775807 but the dataset has 4 items" },
    }
    R.assert_errors(cases)
  end)

  it("that leave one window, or clamp to the whole matrix, give PyTorch's results", function()
    assert.same({ 1, 2 }, v:unfold(1, 2, big):size())
    assert.same({ 4, 5 }, m:tril(big):size())
    R.assert_close(m:tril(big), R.from(m), 0, 0, "tril(big) keeps all")
    R.assert_close(m:tril(small), R.from(m * 0), 0, 0, "tril(small) keeps nothing")
    R.assert_close(m:triu(small), R.from(m), 0, 0, "triu(small) keeps all")
    R.assert_close(m:triu(big), R.from(m * 0), 0, 0, "triu(big) keeps nothing")
    assert.equal(0, m:diag(big):numel())
    assert.equal(0, m:diag(small):numel())
    assert.equal(10, v:roll(big):numel())
    assert.same({ 1, 2, 1 }, F.max_pool1d(ddp.randn(1, 2, 9), 2, big):size())
    assert.same({ 1, 2, 1 }, F.conv1d(ddp.randn(1, 2, 9), ddp.randn(2, 2, 3), nil, big):size())
    local parts = { v:chunk(big) }
    assert.equal(10, #parts)
    parts = { v:split(big) }
    assert.equal(1, #parts)
    R.assert_close(ddp.roll(v, big), R.from(ddp.roll(v, big % 10)), 0, 0, "roll")
    -- the whole dataset in one batch (the batch count once wrapped around to none)
    local dl = ddp.data.DataLoader(ddp.data.TensorDataset(m), { batch_size = big })
    assert.equal(1, #dl)
    local n = 0
    for b in dl:iter() do
      n = n + 1
      assert.same({ 4, 5 }, b:size())
    end
    assert.equal(1, n)
    -- randint over the widest range PyTorch allows (its span overflowed a signed difference)
    local r = ddp.randint(small, big, { 1000 })
    assert.is_true(r:min():item() < 0 and r:max():item() > 0, "both halves of the range drawn")
  end)
end)
