-- A second sweep of extreme arguments (math.maxinteger, math.mininteger, 1e300, NaN) through the sizes, counts,
-- paddings, offsets and values the bindings and the Lua modules take (the first: hostile_args_spec.lua). Each call
-- either returns what PyTorch's would or raises a Lua error naming the op; none may overflow (this spec runs under
-- UBSan in `make test`), loop until killed, or return a wrong-sized result. These found, on 2026-12-07: an empty
-- shape such as [0, 2^63 - 1, 2^63 - 1] overflowing its strides (tensor.c; PyTorch: "Stride calculation
-- overflowed"), a generator's offset and randint's and multinomial's counter counts overflowing, conv2d's output
-- plane overflowing with a padding of 2^40, F.pad wrapping a size around (ZeroPad2d(math.maxinteger) gave a 4 x 4
-- result) or building a Lua list of 2^40 positions, ddp.full saturating 1e300 / NaN into int64 and rounding
-- 2^63 - 2 to 2^63 - 1, TransformerEncoder(layer, math.maxinteger) copying layers until killed, repeat_interleave's
-- counts summing around to nothing, NaN passing the [0, 1] checks of label_smoothing and dropout, and eye,
-- tril_indices, diag_embed, histc, histogram and LSTMCell raising another op's error about a wrapped size.
local ddp = require "ddplua"
local F, nn = ddp.nn.F, ddp.nn
local R = require "helpers.ref"

local big, small, nan = math.maxinteger, math.mininteger, 0 / 0
local function i64(list) return ddp.tensor(list, { dtype = "int64" }) end

describe("extreme arguments, second sweep", function()
  local x, v, m = ddp.randn(2, 3, 6, 6), ddp.randn(10), ddp.randn(4, 5)

  it("are refused with the op's name", function()
    local gen = { generator = { seed = 1, offset = big } }
    local cases = {
      { function() return ddp.zeros(0, big, big) end, "its strides overflow" },
      { function() return ddp.zeros(0):view(0, big, big) end, "view: shape [0, 9223372036854775807" },
      { function() return ddp.zeros(1 << 40, 0, 1 << 40) end, "its strides overflow" },
      { function() return ddp.randint(0, 5, { 1 << 32, 1 << 32 }) end, "too large" },
      { function() return ddp.multinomial(ddp.rand(2, 5), big, true) end,
        "multinomial: 9223372036854775807 samples for each of 2 rows is too large" },
      { function() return F.conv2d(x, ddp.randn(3, 3, 3, 3), nil, 1, 1 << 40) end, "conv2d: the output" },
      { function() return F.pad(x, { big, big }) end, "F.pad: the input size 6 plus the padding" },
      { function() return nn.ZeroPad2d(big)(x) end, "ZeroPad2d" },
      { function() return nn.ConstantPad1d(big, 0)(m) end, "more than 2^59" },
      { function() return nn.ReplicationPad1d(small)(ddp.randn(1, 2, 9)) end, "negative output size" },
      { function() return F.pad(x, { 1 << 40, 0, 1 << 40, 0 }) end, "F.pad: the output" },
      { function() return nn.ReplicationPad2d(1 << 40)(x) end, "cannot be made" },
      { function() return ddp.full({ 3 }, 1e300, { dtype = "int64" }) end,
        "full: value 1e+300 cannot be converted to type int64" },
      { function() return ddp.full({ 3 }, nan, { dtype = "int64" }) end, "cannot be converted to type int64" },
      { function() return ddp.full({ 3 }, 300, { dtype = "uint8" }) end, "cannot be converted to type uint8" },
      { function() return ddp.full_like(v, 1e300) end, "cannot be converted to type float32" },
      { function() return nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2), big) end,
        "TransformerEncoder: 9223372036854775807 copies" },
      { function() return nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2), big) end, "TransformerDecoder" },
      { function() return nn.TransformerEncoder(nn.Identity(), big) end, "too many weights" },
      { function() return ddp.repeat_interleave(i64({ big, big, 2 })) end, "repeat_interleave: the counts sum" },
      { function() return v:narrow(1, 1, 3):repeat_interleave(i64({ big, big, 2 })) end, "repeat_interleave" },
      { function() return F.cross_entropy(m, i64({ 1, 2, 3, 4 }), { label_smoothing = nan }) end, "label_smoothing" },
      { function() return nn.CrossEntropyLoss({ label_smoothing = nan }) end, "label_smoothing" },
      { function() return nn.Dropout(nan) end, "Dropout" },
      { function() return nn.RNN(4, 4, { dropout = nan }) end, "RNN: dropout" },
      { function() return ddp.eye(big) end, "eye: a 9223372036854775807 x 9223372036854775807 matrix is too large" },
      { function() return ddp.eye(big, 0) end, "eye" },
      { function() return ddp.tril_indices(big, big) end, "tril_indices" },
      { function() return ddp.diag_embed(v, big) end, "diag_embed: offset 9223372036854775807" },
      { function() return ddp.diag_embed(v, small) end, "diag_embed" },
      { function() return ddp.histc(v, big) end, "histc: bins" },
      { function() return ddp.histogram(v, big) end, "histogram: bins" },
      { function() return nn.LSTMCell(4, big) end, "LSTMCell: hidden_size" },
      -- 3 * embed_dim wrapped around to a negative size (2026-12-07)
      { function() return nn.MultiheadAttention(1 << 62, 1) end, "MultiheadAttention: embed_dim 4611686018427387904" },
      { function() return nn.TransformerEncoderLayer(1 << 62, 1) end, "is too large" },
      -- torch.mul(a, b, out=c) ported as it reads: the options table was ignored and c kept its old values
      { function() return ddp.mul(m, m, { out = ddp.empty(4, 5) }) end, "mul: expected 2 operands, got a table" },
      { function() return ddp.div(m, 2, { out = m }) end, "div: expected 2 operands, got a table" },
      { function() return ddp.maximum(m, m, m) end, "maximum: expected 2 operands, got a userdata" },
      { function() return m:pow(2, "x") end, "pow: expected 2 operands, got a string" },
    }
    R.assert_errors(cases)
    -- the generator's offset wraps around as a Lua integer does (it overflowed a signed sum)
    for _, f in ipairs({
      function(g) return ddp.randperm(5, g) end,
      function(g) return ddp.randint(0, 5, { 3 }, g) end,
      function(g) return ddp.multinomial(ddp.rand(5), 2, g) end,
      function(g) return ddp.bernoulli(ddp.rand(5), g) end,
    }) do
      gen.generator.offset = big
      assert.equal(ddp.is_tensor(f(gen)), true)
      assert.is_true(gen.generator.offset < 0, "offset wrapped")
    end
  end)

  it("that stay in range give PyTorch's results", function()
    -- full keeps an integer exactly, and uint8 takes -1 as 255 (c10's checked_convert)
    assert.equal(big - 1, ddp.full({ 2 }, big - 1):tolist()[1])
    assert.equal(255, ddp.full({ 2 }, -1, { dtype = "uint8" }):tolist()[1])
    assert.same({ 2, 3 }, v:new_zeros(2, 3):size())
    assert.equal("int64", v:new_ones(2, 3, { dtype = "int64" }):dtype())
    -- a pad and a crop past the input: 6 + (2^63 - 1) - 2^63 = 5 values, all from the padding
    local y = F.pad(x, { big, small })
    assert.same({ 2, 3, 6, 5 }, y:size())
    assert.equal(0, y:abs():sum():item())
    assert.same({ 2, 3, 7, 11 }, F.pad(x, { 2, 3, 1, 0 }):size())
    assert.same({ 3, 0 }, ddp.eye(3, 0):size())
    assert.same({ 3 }, ddp.repeat_interleave(i64({ 2, 0, 1 })):size())
    assert.equal(3, #nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2), 3).layers)
  end)
end)
