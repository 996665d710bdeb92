/* TG_FRIEND marks the few internal functions of libtapegrad that
 * tapegrad_check and tapegrad_dist, libraries of their own above it, call:
 * besides the API (TG_API), a shared libtapegrad exports these, for those
 * two. Not for programs. tests/source/exports.sh keeps the list exact:
 * each one is called by check/ or data_parallel/, and they call no other hidden
 * function. Not installed. */
#ifndef TG_TENSOR_FRIEND_H
#define TG_TENSOR_FRIEND_H

#if defined(__GNUC__) || defined(__clang__)
#define TG_FRIEND __attribute__((visibility("default")))
#else
#define TG_FRIEND
#endif

#endif
