-- nn.TransformerEncoderLayer and nn.TransformerEncoder free their intermediates once read when the layer and all
-- its children are the library's own modules (nn/util.lua's is_library and release): with the collector stopped,
-- backward gives every activation back; an evaluation holds about one layer's temporaries. What a user's activation
-- function, subclass or module keeps stays, and so does the caller's input when a child returns its input as it came.
local ddp = require "ddplua"
local nn = ddp.nn
local R = require "helpers.ref"

local MiB = 1 << 20
local function live() return ddp.core.memory_stats().live_bytes end

-- fn() with the collector stopped; its results. No cached blocks first: a request may take a cached block of up to
-- twice its size (alloc_cpu.c), counted live at that size, and which blocks the specs before left varies
local function without_gc(fn)
  collectgarbage()
  collectgarbage()
  ddp.core.empty_cache()
  collectgarbage("stop")
  local res = table.pack(pcall(fn))
  collectgarbage("restart")
  assert(res[1], res[2])
  return table.unpack(res, 2, res.n)
end

describe("transformer encoder memory", function()
  for _, norm_first in ipairs({ true, false }) do
    it("gives the activations back during backward without a collection (norm_first=" .. tostring(norm_first) .. ")",
      function()
        ddp.manual_seed(3)
        local layer = nn.TransformerEncoderLayer(64, 4, { dim_feedforward = 128, dropout = 0, batch_first = true,
          norm_first = norm_first, activation = "gelu" })
        local enc = nn.TransformerEncoder(layer, 3)
        local x = ddp.randn(64, 50, 64)
        local held, after = without_gc(function()
          local before = live()
          local loss = enc(x):sum()
          local h = live() - before
          loss:backward()
          return h, live() - before
        end)
        -- three layers' saved activations (each [64, 50, 64] or [64, 50, 128]: 0.8 / 1.6 MiB) were held; after
        -- backward the output (0.8 MiB), the parameters' gradients (0.4 MiB) and a few views' storage remain (1.9
        -- and 2.7 MiB here; 5.1 and more before the layers released their intermediates)
        assert(held > 25 * MiB, string.format("%.1f MiB held for backward", held / MiB))
        assert(after < 0.1 * held, string.format("%.1f MiB of %.1f still held after backward", after / MiB,
          held / MiB))
      end)
  end

  it("holds about one layer's temporaries in an evaluation", function()
    local layer = nn.TransformerEncoderLayer(64, 4, { dim_feedforward = 256, dropout = 0, batch_first = true })
    local enc = nn.TransformerEncoder(layer, 6)
    local x = ddp.randn(256, 50, 64) -- 3.1 MiB; the feed-forward's [256, 50, 256] 12.5 MiB
    local y, grown = without_gc(function()
      local before = live()
      local out = ddp.no_grad(function() return enc(x) end)
      return out, live() - before
    end)
    assert.equal(256, y:size(1))
    -- the output alone is live (the garbage of six layers would be ~200 MiB)
    assert(grown < 4 * MiB, string.format("%.1f MiB live after the evaluation", grown / MiB))
  end)

  it("keeps what a user's activation function keeps, and the caller's input through identity children", function()
    ddp.manual_seed(5)
    local kept = {}
    local function act(h)
      kept.input = h
      kept.output = h:relu()
      return kept.output
    end
    local layer = nn.TransformerEncoderLayer(16, 2, { dim_feedforward = 32, dropout = 0, batch_first = true,
      activation = act })
    local x = ddp.randn(3, 5, 16)
    local y = layer(x)
    assert.equal(3 * 5 * 32, kept.input:isfinite():sum():item())
    assert.equal(0, (kept.output - kept.input:relu()):abs():max():item())
    -- norms replaced by identities: the blocks get the caller's x itself
    for _, nf in ipairs({ true, false }) do
      local l2 = nn.TransformerEncoderLayer(16, 2, { dim_feedforward = 32, dropout = 0, batch_first = true,
        norm_first = nf })
      l2.norm1, l2.norm2 = nn.Identity(), nn.Identity()
      local src = ddp.randn(3, 5, 16)
      local out = l2(src)
      assert.equal(3 * 5 * 16, src:isfinite():sum():item()) -- still usable
      -- the same as the layer computed by hand from its parts
      local a = l2.self_attn(src, src, src, { need_weights = false })
      local x1 = src + a
      local want = x1 + l2.linear2(l2.linear1(x1):relu())
      R.assert_close(out, R.from(want), 1e-5, 1e-5, "norm_first=" .. tostring(nf))
    end
    assert.equal(3, y:size(1))
    -- a block replaced on the instance: the user's code, which may keep what it reads
    local l3 = nn.TransformerEncoderLayer(16, 2, { dim_feedforward = 32, dropout = 0, batch_first = true })
    local seen
    function l3._ff_block(self, h)
      seen = h
      return self.linear2(self.linear1(h):relu())
    end
    l3(ddp.randn(3, 5, 16))
    assert.equal(3 * 5 * 16, seen:isfinite():sum():item())
  end)
end)
