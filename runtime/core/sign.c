/* Ed25519 through libsodium: see sign.h. */
#include "sign.h"
#include "err.h"

#include <sodium.h>
#include <stdio.h>

int bt_sign_init(void) {
  return sodium_init() < 0 ? BT_EIO : 0; /* (1: initialised already) */
}

int bt_sign_keypair(unsigned char pk[BT_SIGN_PUBLIC_BYTES], unsigned char sk[BT_SIGN_SECRET_BYTES]) {
  if (bt_sign_init() < 0) return BT_EIO;
  return crypto_sign_ed25519_keypair(pk, sk) == 0 ? 0 : BT_EIO;
}

void bt_sign_public_of(unsigned char pk[BT_SIGN_PUBLIC_BYTES], const unsigned char sk[BT_SIGN_SECRET_BYTES]) {
  crypto_sign_ed25519_sk_to_pk(pk, sk);
}

int bt_sign_detached(unsigned char sig[BT_SIGN_BYTES], const void *msg, size_t len,
                     const unsigned char sk[BT_SIGN_SECRET_BYTES]) {
  if (bt_sign_init() < 0) return BT_EIO;
  return crypto_sign_ed25519_detached(sig, NULL, msg, len, sk) == 0 ? 0 : BT_EIO;
}

int bt_sign_verify(const unsigned char sig[BT_SIGN_BYTES], const void *msg, size_t len,
                   const unsigned char pk[BT_SIGN_PUBLIC_BYTES]) {
  if (bt_sign_init() < 0) return BT_EINVAL;
  return crypto_sign_ed25519_verify_detached(sig, msg, len, pk) == 0 ? 0 : BT_EINVAL;
}

void bt_sign_keyid(char out[BT_SIGN_KEYID_CHARS + 1], const unsigned char pk[BT_SIGN_PUBLIC_BYTES]) {
  unsigned char h[8];
  int i;
  crypto_generichash(h, sizeof h, pk, BT_SIGN_PUBLIC_BYTES, NULL, 0);
  for (i = 0; i < 8; i++) snprintf(out + 2 * i, 3, "%02x", h[i]);
}
