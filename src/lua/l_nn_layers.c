/* PLACEHOLDER (replaced by the nn-ops work): conv/pool/norm/dropout/embedding bindings. */
#include "lua/l_util.h"
void lt_open_nn_layers(lua_State *L, int module, int methods) { (void)L, (void)module, (void)methods; }
