-- nn.MultiheadAttention, nn.TransformerEncoderLayer, nn.TransformerEncoder, nn.TransformerDecoderLayer,
-- nn.TransformerDecoder and nn.Transformer
-- with PyTorch's weights give PyTorch's outputs and gradients (self- and
-- cross-attention, attn_mask and key_padding_mask in PyTorch's convention,
-- batch_first, the returned weights, post- and pre-norm layers, relu and
-- gelu, a final norm); the fused path (need_weights=false) equals the
-- explicit one; state_dict names are PyTorch's; layer copies are
-- independent; bad arguments are named.
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local nn = ddp.nn

local function names(m)
  local out = {}
  for k in pairs(m:state_dict()) do out[#out + 1] = k end
  return out
end

local function load_from(m, ref, prefix)
  local sd = {}
  for k, v in pairs(ref) do if k:sub(1, #prefix) == prefix then sd[k:sub(#prefix + 1)] = v end end
  m:load_state_dict(sd)
end

describe("nn.MultiheadAttention", function()
  it("has PyTorch's parameter names and shapes", function()
    local m = nn.MultiheadAttention(16, 4)
    assert.are.same({ "in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias" }, names(m))
    assert.are.same({ 48, 16 }, m.in_proj_weight:size())
    assert.are.same({ 0 }, { m.in_proj_bias:abs():max():item() })
    assert.are.same({ "in_proj_weight", "out_proj.weight" }, names(nn.MultiheadAttention(16, 4, 0, false)))
  end)

  it("gives PyTorch's outputs, weights and gradients with PyTorch's weights", function()
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    local x, kv = R.randn({ 5, 3, 16 }, 1):float(), R.randn({ 7, 3, 16 }, 2):float()
    local am = R.randn({ 5, 7 }, 3):gt(1.0)                     -- true: masked out
    local kpm = ddp.tensor({ { 0, 0, 0, 0, 0, 1, 1 }, { 0, 0, 0, 0, 0, 0, 0 }, { 1, 0, 0, 0, 0, 0, 0 } }):byte()
    local fm = R.randn({ 3 * 4, 5, 7 }, 4):float()
    local ref = TR.run([[
torch.manual_seed(0)
m = torch.nn.MultiheadAttention(16, 4)
for k, v in m.state_dict().items(): OUT["w." + k] = v
x, kv = T["x"].clone().requires_grad_(), T["kv"].clone().requires_grad_()
o1, w1 = m(x, x, x)
o2, w2 = m(x, kv, kv, attn_mask=T["am"].bool(), key_padding_mask=T["kpm"].bool(), average_attn_weights=False)
o3, _ = m(x, kv, kv, attn_mask=T["fm"], need_weights=False)
(o1.sum() + (o2 ** 2).sum() + o3.sum() * 0.5).backward()
OUT["o1"], OUT["w1"], OUT["o2"], OUT["w2"], OUT["o3"] = o1, w1, o2, w2, o3
OUT["gx"], OUT["gkv"] = x.grad, kv.grad
for k, v in m.named_parameters(): OUT["g." + k] = v.grad
mb = torch.nn.MultiheadAttention(16, 4, batch_first=True)
mb.load_state_dict(m.state_dict())
OUT["ob"] = mb(x.detach().transpose(0, 1), kv.transpose(0, 1).detach(), kv.transpose(0, 1).detach(), need_weights=False)[0]
]], { x = x, kv = kv, am = am, kpm = kpm, fm = fm })
    local m = nn.MultiheadAttention(16, 4)
    load_from(m, ref, "w.")
    local xx, kk = x:clone():requires_grad_(), kv:clone():requires_grad_()
    local o1, w1 = m(xx, xx, xx)
    local o2, w2 = m(xx, kk, kk, { attn_mask = am, key_padding_mask = kpm, average_attn_weights = false })
    local o3, w3 = m(xx, kk, kk, { attn_mask = fm, need_weights = false })
    assert.is_nil(w3)
    local loss = o1:sum() + (o2 ^ 2):sum() + o3:sum() * 0.5
    loss:backward()
    local tol = { 2e-6, 2e-5 }
    for _, k in ipairs({ "o1", "w1", "o2", "w2", "o3" }) do
      local got = ({ o1 = o1, w1 = w1, o2 = o2, w2 = w2, o3 = o3 })[k]
      R.assert_close(got, R.from(ref[k]), tol[1], tol[2], k)
    end
    R.assert_close(xx.grad, R.from(ref.gx), 1e-5, 1e-4, "query gradient")
    R.assert_close(kk.grad, R.from(ref.gkv), 1e-5, 1e-4, "key/value gradient")
    for name, t in m:named_parameters() do R.assert_close(t.grad, R.from(ref["g." .. name]), 1e-5, 1e-4, name) end
    local mb = nn.MultiheadAttention(16, 4, { batch_first = true })
    mb:load_state_dict(m:state_dict())
    local ob = mb(x:transpose(1, 2), kv:transpose(1, 2), kv:transpose(1, 2), { need_weights = false })
    R.assert_close(ob, R.from(ref.ob), tol[1], tol[2], "batch_first")
  end)

  it("gives the same result fused (need_weights=false) and explicit, with masks and is_causal", function()
    local m = nn.MultiheadAttention(8, 2):double()
    local x = R.randn({ 6, 2, 8 }, 5)
    local kpm = ddp.tensor({ { 0, 0, 0, 0, 1, 1 }, { 0, 0, 0, 0, 0, 0 } }):byte()
    local causal = ddp.ones(6, 6):triu(1):byte()
    for _, o in ipairs({ {}, { key_padding_mask = kpm }, { attn_mask = causal }, { is_causal = true },
      { attn_mask = R.randn({ 6, 6 }, 6), key_padding_mask = kpm } }) do
      local a = m(x, x, x, o)
      o.need_weights = false
      local b = m(x, x, x, o)
      R.assert_close(b, R.from(a), 1e-12, 1e-12, "fused vs explicit")
    end
    local x1 = x:select(2, 1) -- unbatched [L, E]: batch 1 of x
    local y = m(x1, x1, x1, { need_weights = false })
    R.assert_close(y, R.from(m(x, x, x):select(2, 1)), 1e-12, 1e-12, "unbatched")
  end)

  it("rejects what it does not support, naming it", function()
    R.assert_error(function() nn.MultiheadAttention(10, 3) end, "embed_dim (10) must be divisible by num_heads (3)")
    R.assert_error(function() nn.MultiheadAttention(8, 2, { kdim = 4 }) end, "kdim different from embed_dim")
    R.assert_error(function() nn.MultiheadAttention(8, 2, { add_bias_kv = true }) end, "add_bias_kv=true is not supported")
    R.assert_error(function() nn.MultiheadAttention(8, 2, { heads = 2 }) end, "unknown option 'heads'")
    local m = nn.MultiheadAttention(8, 2)
    R.assert_error(function() m(ddp.randn(3, 2, 4)) end, "expected query, key and value with 8 features")
    R.assert_error(function() m(ddp.randn(3, 2, 8), nil, nil, { key_padding_mask = ddp.ones(3, 3):byte() }) end,
      "key_padding_mask must be [2, 3]")
    R.assert_error(function() m(ddp.randn(3, 2, 8), nil, nil, { mask = 1 }) end, "unknown option 'mask'")
  end)
end)

describe("nn.TransformerEncoderLayer and nn.TransformerEncoder", function()
  it("have PyTorch's names and independent layer copies", function()
    local layer = nn.TransformerEncoderLayer(8, 2, { dim_feedforward = 16 })
    assert.are.same({ "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
      "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias", "norm1.weight",
      "norm1.bias", "norm2.weight", "norm2.bias" }, names(layer))
    local enc = nn.TransformerEncoder(layer, 2, { norm = nn.LayerNorm(8) })
    local n = names(enc)
    assert.are.equal("layers.0.self_attn.in_proj_weight", n[1])
    assert.are.equal("layers.1.norm2.bias", n[24])
    assert.are.equal("norm.bias", n[26])
    local a, b = enc.layers[1].linear1.weight, enc.layers[2].linear1.weight
    assert.are.same(a:totable(), b:totable()) -- copies, as PyTorch's deepcopy
    ddp.no_grad(function() a:fill_(0) end)
    assert.are_not.same(a:totable(), b:totable())
    assert.are.equal(#enc:parameters(), 2 * 12 + 2)
  end)

  it("give PyTorch's outputs and gradients with PyTorch's weights, post- and pre-norm, relu and gelu", function()
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    local x = R.randn({ 3, 6, 16 }, 7):float() -- batch_first
    local kpm = ddp.tensor({ { 0, 0, 0, 0, 0, 1 }, { 0, 0, 0, 0, 0, 0 }, { 0, 0, 0, 1, 1, 1 } }):byte()
    local causal = ddp.ones(6, 6):triu(1):byte()
    local ref = TR.run([[
torch.manual_seed(0)
out = {}
for i, (nf, act) in enumerate([(False, "relu"), (True, "gelu")]):
    layer = torch.nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0, activation=act, batch_first=True,
                                             norm_first=nf)
    enc = torch.nn.TransformerEncoder(layer, 2, norm=torch.nn.LayerNorm(16), enable_nested_tensor=False)
    enc.eval()
    for k, v in enc.state_dict().items(): OUT["w%d.%s" % (i, k)] = v
    x = T["x"].clone().requires_grad_()
    y = enc(x, mask=T["causal"].bool(), src_key_padding_mask=T["kpm"].bool())
    ((y ** 2).sum()).backward()
    OUT["y%d" % i], OUT["gx%d" % i] = y, x.grad
    for k, v in enc.named_parameters(): OUT["g%d.%s" % (i, k)] = v.grad
]], { x = x, kpm = kpm, causal = causal })
    for i, cfg in ipairs({ { false, "relu" }, { true, "gelu" } }) do
      local layer = nn.TransformerEncoderLayer(16, 4, { dim_feedforward = 32, dropout = 0, activation = cfg[2],
        batch_first = true, norm_first = cfg[1] })
      local enc = nn.TransformerEncoder(layer, 2, { norm = nn.LayerNorm(16) })
      load_from(enc, ref, string.format("w%d.", i - 1))
      enc:eval()
      local xx = x:clone():requires_grad_()
      local y = enc(xx, { mask = causal, src_key_padding_mask = kpm })
      local loss = (y ^ 2):sum()
      loss:backward()
      R.assert_close(y, R.from(ref["y" .. (i - 1)]), 1e-5, 1e-4, "output " .. i)
      R.assert_close(xx.grad, R.from(ref["gx" .. (i - 1)]), 1e-4, 1e-3, "input gradient " .. i)
      for name, t in enc:named_parameters() do
        R.assert_close(t.grad, R.from(ref[string.format("g%d.%s", i - 1, name)]), 1e-4, 1e-3, name)
      end
    end
  end)

  it("take settings positionally, then the rest by name, as PyTorch's keywords follow its positional ones", function()
    local layer = nn.TransformerEncoderLayer(8, 2, 16, 0.0, { batch_first = true, norm_first = true })
    assert.are.same({ 16, 8 }, layer.linear1.weight:size())
    assert.is_true(layer.batch_first and layer.norm_first and layer.self_attn.batch_first)
    assert.are.equal(0, layer.dropout.p)
    assert.are.same({ 3, 5, 8 }, layer(ddp.randn(3, 5, 8)):size())
    local mha = nn.MultiheadAttention(8, 2, 0.25, { batch_first = true })
    assert.are.equal(0.25, mha.dropout)
    assert.is_true(mha.batch_first)
    R.assert_error(function() nn.TransformerEncoderLayer(8, 2, 16, { dim_feedforward = 32 }) end,
      "dim_feedforward is given twice")
    R.assert_error(function() nn.MultiheadAttention(8, 2, 0.0, { heads = 2 }) end, "unknown option 'heads'")
    R.assert_error(function() nn.MultiheadAttention(8, 2, { batch_first = true }, 0.0) end,
      "an options table must come last")
  end)
  it("rejects bad arguments", function()
    R.assert_error(function() nn.TransformerEncoderLayer(8, 2, { activation = "tanh" }) end,
      "activation should be \"relu\", \"gelu\" or a function")
    R.assert_error(function() nn.TransformerEncoder("layer", 2) end, "encoder_layer must be a module")
    R.assert_error(function() nn.TransformerEncoderLayer(8, 2)(ddp.randn(3, 2, 8), { mask = 1 }) end,
      "unknown option 'mask'")
  end)
end)

describe("nn.TransformerDecoderLayer, nn.TransformerDecoder and nn.Transformer", function()
  it("have PyTorch's state_dict keys", function()
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    local ref = TR.run([[
m = torch.nn.Transformer(16, 4, 2, 3, 32)
keys = "\n".join(m.state_dict().keys())
OUT["keys"] = torch.tensor(list(keys.encode()), dtype=torch.uint8)
]], {})
    local want = {}
    for k in string.char(table.unpack(ref.keys:totable())):gmatch("[^\n]+") do want[#want + 1] = k end
    local got = names(nn.Transformer(16, 4, 2, 3, 32))
    table.sort(want)
    table.sort(got)
    assert.are.same(want, got)
  end)

  it("give PyTorch's outputs and gradients with PyTorch's weights (masks, batch_first or not, pre-norm, gelu)", function()
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    local src, tgt = R.randn({ 2, 7, 16 }, 31):float(), R.randn({ 2, 5, 16 }, 32):float() -- batch-first
    local src_kpm = ddp.tensor({ { 0, 0, 0, 0, 0, 1, 1 }, { 0, 0, 0, 0, 0, 0, 0 } }):byte()
    local tgt_kpm = ddp.tensor({ { 0, 0, 0, 0, 1 }, { 0, 0, 0, 0, 0 } }):byte()
    local ref = TR.run([[
torch.manual_seed(0)
for i, (bf, nf, act) in enumerate([(True, False, "relu"), (False, True, "gelu")]):
    m = torch.nn.Transformer(16, 4, 2, 2, 32, dropout=0.0, activation=act, batch_first=bf, norm_first=nf)
    m.eval()
    for k, v in m.state_dict().items(): OUT["w%d.%s" % (i, k)] = v
    s, t = T["src"].clone(), T["tgt"].clone()
    if not bf: s, t = s.transpose(0, 1).contiguous(), t.transpose(0, 1).contiguous()
    s.requires_grad_(); t.requires_grad_()
    y = m(s, t, tgt_mask=m.generate_square_subsequent_mask(5), src_key_padding_mask=T["skpm"].bool(),
          tgt_key_padding_mask=T["tkpm"].bool(), memory_key_padding_mask=T["skpm"].bool())
    ((y ** 2).sum()).backward()
    OUT["y%d" % i], OUT["gs%d" % i], OUT["gt%d" % i] = y, s.grad, t.grad
    for k, v in m.named_parameters(): OUT["g%d.%s" % (i, k)] = v.grad
]], { src = src, tgt = tgt, skpm = src_kpm, tkpm = tgt_kpm })
    for i, cfg in ipairs({ { true, false, "relu" }, { false, true, "gelu" } }) do
      local m = nn.Transformer(16, 4, 2, 2, 32, 0.0, cfg[3], { batch_first = cfg[1], norm_first = cfg[2] })
      load_from(m, ref, string.format("w%d.", i - 1))
      m:eval()
      local s, t = src:clone(), tgt:clone()
      if not cfg[1] then s, t = s:transpose(1, 2):contiguous(), t:transpose(1, 2):contiguous() end
      s:requires_grad_()
      t:requires_grad_()
      local y = m(s, t, { tgt_mask = nn.Transformer.generate_square_subsequent_mask(5), src_key_padding_mask = src_kpm,
        tgt_key_padding_mask = tgt_kpm, memory_key_padding_mask = src_kpm })
      ;(y ^ 2):sum():backward()
      local k = i - 1
      R.assert_close(y, R.from(ref["y" .. k]), 1e-5, 1e-4, "output " .. i)
      R.assert_close(s.grad, R.from(ref["gs" .. k]), 1e-4, 1e-3, "src gradient " .. i)
      R.assert_close(t.grad, R.from(ref["gt" .. k]), 1e-4, 1e-3, "tgt gradient " .. i)
      for name, p in m:named_parameters() do
        R.assert_close(p.grad, R.from(ref[string.format("g%d.%s", k, name)]), 1e-4, 1e-3, name)
      end
    end
  end)

  it("initialise every weight matrix xavier-uniform, and refuse bad arguments", function()
    ddp.manual_seed(2)
    local m = nn.Transformer({ d_model = 16, nhead = 4, num_encoder_layers = 1, num_decoder_layers = 1,
      dim_feedforward = 64 })
    local w = m.decoder.layers[1].linear1.weight -- [64, 16]: bound sqrt(6 / 80)
    assert.is_true(w:abs():max():item() <= math.sqrt(6 / 80) and w:abs():max():item() > 0.9 * math.sqrt(6 / 80))
    local layer = nn.TransformerDecoderLayer(8, 2, 16, 0.0, { batch_first = true })
    assert.are.same({ 3, 4, 8 }, nn.TransformerDecoder(layer, 2)(ddp.randn(3, 4, 8), ddp.randn(3, 6, 8)):size())
    R.assert_error(function() nn.TransformerDecoderLayer(8, 2, { activation = "tanh" }) end,
      "TransformerDecoderLayer", "activation should be")
    R.assert_error(function() nn.TransformerDecoder("layer", 2) end, "decoder_layer must be a module")
    R.assert_error(function() layer(ddp.randn(3, 4, 8)) end, "expected tensors tgt and memory")
    R.assert_error(function() layer(ddp.randn(3, 4, 8), ddp.randn(3, 6, 8), { mask = 1 }) end, "unknown option 'mask'")
    R.assert_error(function() m(ddp.randn(5, 2, 16), ddp.randn(4, 3, 16)) end, "batch number of src (2) and tgt (3)")
    R.assert_error(function() m(ddp.randn(5, 2, 8), ddp.randn(4, 2, 8)) end, "must be equal to d_model (16)")
    R.assert_error(function() nn.Transformer.generate_square_subsequent_mask(-1) end, "sz")
  end)
end)
