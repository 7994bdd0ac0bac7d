-- The Lua blocks of docs/tensor_functions.md run as written, in order, in one chunk after `ddp` and a float32
-- [3, 4] `x` (what the page's blocks assume; later blocks use earlier ones' names), so that the page cannot promise
-- a call that fails. An error names the page and its line.
local U = require "helpers.io_util"

local PAGE = "docs/tensor_functions.md"

describe(PAGE, function()
  it("runs every Lua block", function()
    local blocks = {}
    for _, b in ipairs(U.code_blocks(U.read(PAGE), PAGE)) do
      if b.lang == "lua" then blocks[#blocks + 1] = b end
    end
    assert(#blocks >= 5, PAGE .. ": expected its Lua blocks, found " .. #blocks)
    -- one chunk whose line numbers are the page's: blank lines stand for the prose between the blocks
    local lines, at = { 'local ddp = require "ddplua"; local x = ddp.rand(3, 4)' }, 1
    for _, b in ipairs(blocks) do
      while at < b.fence do lines[#lines + 1] = ""; at = at + 1 end
      for _, l in ipairs(b.lines) do lines[#lines + 1] = l; at = at + 1 end
    end
    local chunk, err = load(table.concat(lines, "\n"), "=" .. PAGE)
    assert(chunk, err)
    local ok, msg = pcall(chunk)
    assert(ok, string.format("%s: a block fails: %s", PAGE, tostring(msg)))
  end)
end)
