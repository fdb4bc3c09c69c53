/* The error table's lookup functions; the table itself is in err.h. */
#include "err.h"

const char *bt_err_name(int err) {
  switch (err) {
#define XX(name, value, msg) case value: return #name;
    BT_ERRNO_MAP(XX)
#undef XX
  }
  if (err < 0 && err > -4096) return uv_err_name(err);
  return "EUNKNOWN";
}

const char *bt_strerror(int err) {
  switch (err) {
#define XX(name, value, msg) case value: return msg;
    BT_ERRNO_MAP(XX)
#undef XX
  }
  if (err < 0 && err > -4096) return uv_strerror(err);
  return "unknown error";
}
