-- README.md stays true. Its training script is examples/quickstart.lua,
-- character for character, and trains (1 epoch on 2 ranks, well above
-- chance); every other ```lua block runs, in order, in one `ddplua` process
-- started in a temporary directory, after the two lines the README says the
-- blocks assume (its own block, found after "Each block runs as it is
-- after"). An error names README.md and the line.
local U = require "helpers.io_util"

local readme = U.read("README.md")
local blocks = U.code_blocks(readme, "README.md")
local lua_blocks = {}
for _, b in ipairs(blocks) do
  if b.lang == "lua" then lua_blocks[#lua_blocks + 1] = b end
end

-- the block right after the sentence that announces it
local prelude
do
  local at = readme:find("Each block runs as it is after", 1, true)
  assert(at, "README.md no longer says what the tour's blocks assume")
  local line_of_sentence = select(2, readme:sub(1, at):gsub("\n", "")) + 1
  for _, b in ipairs(lua_blocks) do
    if b.fence > line_of_sentence then prelude = b; break end
  end
end

describe("README.md", function()
  it("shows examples/quickstart.lua as its training script, and that script trains on 2 ranks", function()
    local script = lua_blocks[1]
    assert.are.equal(U.read("examples/quickstart.lua"), script.code .. "\n",
      "README.md's first lua block (line " .. script.fence .. ") differs from examples/quickstart.lua")
    local dir = U.tmpdir()
    local ok, out = U.run("cd " .. U.quote(dir) .. " && " .. U.quote(U.abspath(U.ddplua)) .. " --nproc 2 " ..
      U.quote(U.abspath("examples/quickstart.lua")) .. " epochs=1")
    U.rm_rf(dir)
    assert.is_true(ok, out)
    local acc = out:match("%[rank 0%] epoch 1  loss %d+%.%d+  test accuracy (%d+%.%d+)%%")
    assert.is_not_nil(acc, out)
    assert.is_true(tonumber(acc) > 75, "accuracy after one epoch: " .. acc)
    assert.is_nil(out:find("%[rank 1%] epoch"), "only rank 0 prints")
  end)

  it("runs every other lua block of the tour, in order, in one process", function()
    assert.is_not_nil(prelude, "no lua block after 'Each block runs as it is after'")
    local runner = {
      "local text = assert(io.open(" .. string.format("%q", U.abspath("README.md")) .. ")):read('a')",
      "local blocks = {}",
    }
    local n = 0
    for i = 2, #lua_blocks do
      local b = lua_blocks[i]
      if b ~= prelude then
        n = n + 1
        -- padded so that the chunk's line numbers are README.md's; the
        -- prelude goes on the fence's line
        local chunk = string.rep("\n", b.fence - 1) .. prelude.code:gsub("\n", " ") .. "\n" .. b.code
        runner[#runner + 1] = string.format("assert(load(%q, '@README.md'))()", chunk)
        runner[#runner + 1] = string.format("print('ran README.md block at line %d')", b.fence)
      end
    end
    assert.is_true(n >= 8, "expected the tour's blocks, found " .. n)
    local dir = U.tmpdir()
    U.write(dir .. "/tour.lua", table.concat(runner, "\n") .. "\n")
    local ok, out = U.run("cd " .. U.quote(dir) .. " && " .. U.quote(U.abspath(U.ddplua)) .. " tour.lua")
    U.rm_rf(dir)
    assert.is_true(ok, out)
    local ran = select(2, out:gsub("ran README.md block at line", ""))
    assert.are.equal(n, ran, out)
  end)
end)
