-- CUDA availability as a CPU-only machine sees it: the plugin loads or
-- explains, every way of asking for a GPU fails with that explanation, and
-- the device helpers fall back to the CPU. On a machine with a GPU the same
-- spec checks the positive side instead (tests/gpu has the real GPU suite).
local ddp = require "ddplua"

local available, reason = ddp.cuda_is_available()

local function err_of(f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok)
  return tostring(e)
end

describe("cuda availability", function()
  if not available then
    it("says why CUDA is unavailable", function()
      assert.is_string(reason)
      assert.matches("CUDA is not available: ", reason)
      -- the reason is specific: a missing driver, no visible GPU, or no plugin
      assert.is_truthy(reason:find("driver", 1, true) or reason:find("no GPU is visible", 1, true) or
                       reason:find("plugin", 1, true))
      assert.are.equal(0, ddp.cuda_device_count())
    end)

    it("raises that reason wherever a CUDA device is requested", function()
      local x = ddp.ones(2)
      for _, f in ipairs({
        function() return ddp.zeros(2, { device = "cuda" }) end,
        function() return ddp.randn({ 2, 2 }, { device = "cuda:0" }) end,
        function() return ddp.tensor({ 1, 2 }, { device = "cuda" }) end,
        function() return ddp.arange(0, 4, 1, { device = "cuda" }) end,
        function() return x:to("cuda:0") end,
        function() return x:cuda() end,
        function() return ddp.cuda_memory_stats() end,
        function() return ddp.cuda_device_name(0) end,
      }) do
        assert.matches("CUDA is not available: ", err_of(f))
      end
    end)

    it("falls back to the CPU in the device helpers", function()
      assert.are.equal("cpu", ddp.device())
      ddp.synchronize() -- nothing queued anywhere: a no-op
      ddp.cuda_empty_cache()
      ddp.set_float32_matmul_precision("high")
      assert.are.equal("high", ddp.get_float32_matmul_precision())
      ddp.set_float32_matmul_precision("highest")
    end)
  else
    it("reports the GPU and puts tensors on it", function()
      assert.is_true(ddp.cuda_device_count() >= 1)
      assert.matches("^cuda:%d+$", ddp.device())
      local t = ddp.ones(3, { device = ddp.device() })
      assert.are.equal(ddp.device(), t:device())
      assert.are.same({ 1.0, 1.0, 1.0 }, t:totable())
      assert.is_string(ddp.cuda_device_name(0))
    end)

    it("names the device and the visible range for a device that does not exist", function()
      local n = ddp.cuda_device_count()
      local e = err_of(function() return ddp.zeros(2, { device = "cuda:" .. n }) end)
      assert.matches("cuda:" .. n .. " does not exist", e)
    end)
  end

  it("rejects an unknown matmul precision, naming it", function()
    assert.matches("expected \"highest\", \"high\" or \"medium\", got fast",
                   err_of(ddp.set_float32_matmul_precision, "fast"))
  end)

  -- a fresh process, since the plugin is looked for once per process
  local function with_plugin(path)
    local cmd = "DDPLUA_CUDA_PLUGIN=" .. path .. " lua5.4 -e '" ..
                "package.path=\"./lua/?.lua;./lua/?/init.lua;\"..package.path " ..
                "package.cpath=\"" .. package.cpath .. "\" " ..
                "local ddp = require \"ddplua\" " ..
                "print(ddp.cuda_is_available(), select(2, ddp.cuda_is_available())) " ..
                "print(select(2, pcall(ddp.zeros, 2, {device = \"cuda\"})))' 2>&1"
    local p = assert(io.popen(cmd))
    local out = p:read("a")
    p:close()
    return out
  end

  it("explains a plugin that cannot be loaded (DDPLUA_CUDA_PLUGIN)", function()
    local out = with_plugin("/nonexistent/ddplua_cuda.so")
    assert.matches("CUDA is not available: this ddplua was built without the CUDA backend or its plugin could " ..
                   "not be loaded %(tried /nonexistent/ddplua_cuda.so", out)
    local _, count = out:gsub("CUDA is not available", "")
    assert.are.equal(2, count)
  end)

  local core_so = package.searchpath("ddplua.core", package.cpath)
  local plugin = core_so and core_so:gsub("ddplua/core%.so$", "ddplua_cuda.so")
  local built = plugin and io.open(plugin, "rb")
  if built then
    built:close()
    it("loads the built plugin, which then reports the GPU or explains its absence itself", function()
      local out = with_plugin(plugin)
      if available then
        assert.matches("^true", out)
      else
        -- these words come from the plugin's own check (dp_cuda_plugin_init)
        assert.is_truthy(out:find("no usable NVIDIA driver", 1, true) or out:find("no GPU is visible", 1, true),
                         out)
        local _, count = out:gsub("CUDA is not available", "")
        assert.are.equal(2, count)
      end
    end)
  else
    pending("the CUDA plugin was not built here (DDPLUA_CUDA=OFF or no toolkit): nothing to load")
  end
end)
