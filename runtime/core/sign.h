/*
 * Ed25519 signatures over byte strings (libsodium), for signed job and
 * policy sources (docs/security.md). Keys and signatures are raw bytes
 * here; their text forms are lua/baton/sign.lua's.
 */
#ifndef BATON_SIGN_H
#define BATON_SIGN_H

#include <stddef.h>

#define BT_SIGN_PUBLIC_BYTES 32
#define BT_SIGN_SECRET_BYTES 64 /* libsodium's: the seed, then the public key */
#define BT_SIGN_BYTES 64
#define BT_SIGN_KEYID_CHARS 16  /* hex, without the NUL */

/** Initialises libsodium once (safe to call again); 0 or BT_EIO. */
int bt_sign_init(void);

/** A new key pair from the system's random source; 0 or BT_EIO. */
int bt_sign_keypair(unsigned char pk[BT_SIGN_PUBLIC_BYTES], unsigned char sk[BT_SIGN_SECRET_BYTES]);

/** The public half of secret key sk. */
void bt_sign_public_of(unsigned char pk[BT_SIGN_PUBLIC_BYTES], const unsigned char sk[BT_SIGN_SECRET_BYTES]);

/** The detached signature of msg (len bytes) by sk; 0 or BT_EIO. */
int bt_sign_detached(unsigned char sig[BT_SIGN_BYTES], const void *msg, size_t len,
                     const unsigned char sk[BT_SIGN_SECRET_BYTES]);

/** 0 if sig is pk's signature of msg, else BT_EINVAL. */
int bt_sign_verify(const unsigned char sig[BT_SIGN_BYTES], const void *msg, size_t len,
                   const unsigned char pk[BT_SIGN_PUBLIC_BYTES]);

/** A short name of public key pk: the first 8 bytes of its BLAKE2b hash in
 * hex, NUL-terminated in out. */
void bt_sign_keyid(char out[BT_SIGN_KEYID_CHARS + 1], const unsigned char pk[BT_SIGN_PUBLIC_BYTES]);

#endif
