/* runtime/core/sign.c: Ed25519 through libsodium, without a Lua state. */
#include "err.h"
#include "sign.h"
#include "tap.h"

#include <string.h>

int main(void) {
  unsigned char pk[BT_SIGN_PUBLIC_BYTES], sk[BT_SIGN_SECRET_BYTES], pk2[BT_SIGN_PUBLIC_BYTES],
      sk2[BT_SIGN_SECRET_BYTES], back[BT_SIGN_PUBLIC_BYTES], sig[BT_SIGN_BYTES];
  char id[BT_SIGN_KEYID_CHARS + 1], id2[BT_SIGN_KEYID_CHARS + 1];
  const char msg[] = "baton-signature-v1\0job\0tick\0return {}\n";
  size_t len = sizeof msg - 1;
  char other[sizeof msg];
  size_t i;

  is_int(bt_sign_init(), 0, "init");
  is_int(bt_sign_init(), 0, "init again");
  is_int(bt_sign_keypair(pk, sk), 0, "a key pair");
  is_int(bt_sign_keypair(pk2, sk2), 0, "another key pair");
  ok(memcmp(pk, pk2, sizeof pk) != 0, "two key pairs differ");
  bt_sign_public_of(back, sk);
  ok(memcmp(back, pk, sizeof pk) == 0, "the public half of the secret key");
  is_int(bt_sign_detached(sig, msg, len, sk), 0, "sign");
  is_int(bt_sign_verify(sig, msg, len, pk), 0, "the signature verifies");
  is_int(bt_sign_verify(sig, msg, len, pk2), BT_EINVAL, "not against another key");
  memcpy(other, msg, sizeof msg);
  other[len - 3] ^= 1;
  is_int(bt_sign_verify(sig, other, len, pk), BT_EINVAL, "not for a changed message");
  is_int(bt_sign_verify(sig, msg, len - 1, pk), BT_EINVAL, "not for a shorter message");
  sig[0] ^= 0x80;
  is_int(bt_sign_verify(sig, msg, len, pk), BT_EINVAL, "not a changed signature");
  bt_sign_keyid(id, pk);
  bt_sign_keyid(id2, pk2);
  is_int((int)strlen(id), BT_SIGN_KEYID_CHARS, "a key id of 16 characters");
  for (i = 0; i < strlen(id); i++)
    if (!strchr("0123456789abcdef", id[i])) break;
  is_int((int)i, BT_SIGN_KEYID_CHARS, "in lower-case hex");
  ok(strcmp(id, id2) != 0, "two keys, two ids");
  bt_sign_keyid(id2, pk);
  is_str(id2, id, "the same key, the same id");
  return tap_done();
}
