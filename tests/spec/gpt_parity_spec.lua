-- examples/gpt/model.lua against ../shared/peers/torch_gpt.py's GPT (the
-- peer imported by /usr/bin/python3): with the peer's weights, the same
-- loss and the same gradient for every parameter (the tied head included),
-- in float32, with the attention fused and written op by op as the peer writes it. Skips, saying why, without torch or the peer script
-- (DDPLUA_PEERS names its directory; else ../shared/peers and
-- ../../shared/peers from the tree, then /work/shared/peers).
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local U = require "helpers.io_util"
local GPT = dofile("examples/gpt/model.lua")

local function peers()
  local root = U.abspath(".")
  for _, d in ipairs({ os.getenv("DDPLUA_PEERS") or "", root .. "/../shared/peers", root .. "/../../shared/peers",
    "/work/shared/peers" }) do
    if d ~= "" and U.exists(d .. "/torch_gpt.py") then return d end
  end
end

describe("the GPT of examples/gpt", function()
  for _, attention in ipairs({ "fused", "manual" }) do
  it("gives torch_gpt.py's loss and gradients with its weights, attention " .. attention, function()
    local dir = peers()
    if not dir then return pending("skipped: ../shared/peers/torch_gpt.py not found (set DDPLUA_PEERS)") end
    if not TR.available() then return pending("skipped: /usr/bin/python3 cannot import torch") end
    ddp.manual_seed(3)
    local idx = ddp.randint(0, 256, { 2, 64 })
    local tgt = ddp.randint(0, 256, { 2, 64 })
    local ref = TR.run(string.format([[
import importlib.util
spec = importlib.util.spec_from_file_location("torch_gpt", %q)
peer = importlib.util.module_from_spec(spec)
spec.loader.exec_module(peer)
torch.manual_seed(0)
m = peer.GPT()
for k, v in m.state_dict().items():
    if not k.endswith(".mask"): OUT["w." + k] = v.clone()
loss = m(T["idx"], T["tgt"])
loss.backward()
OUT["loss"] = loss
for k, v in m.named_parameters(): OUT["g." + k] = v.grad
]], dir .. "/torch_gpt.py"), { idx = idx, tgt = tgt })
    local model = GPT { n_layer = 4, n_head = 4, n_embd = 128, block_size = 128, vocab_size = 256,
      attention = attention }
    local sd = {}
    for k, v in pairs(ref) do if k:sub(1, 2) == "w." then sd[k:sub(3)] = v end end
    model:load_state_dict(sd)
    assert.are.equal(model.wte.weight, model.head.weight) -- still tied after loading
    local loss = model(idx + 1, tgt + 1) -- 1-based ids
    loss:backward()
    R.assert_close(loss, R.from(ref.loss), 2e-6, 1e-6, "loss")
    local n = 0
    for name, p in model:named_parameters() do
      local g = ref["g." .. name]
      R.assert_close(p.grad, R.from(g), 1e-6 * g:abs():max():item() + 1e-9, 1e-4, "gradient of " .. name)
      n = n + 1
    end
    assert.are.equal(52, n) -- the tied head counted once, as in PyTorch
    -- the manual path's causal masks are buffers outside the state_dict (persistent = false), as the loading shows
    assert.are.equal(attention == "manual" and 4 or 0, #model:buffers())
  end)
  end
end)
