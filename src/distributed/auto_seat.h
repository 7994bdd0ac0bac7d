/* The seat of a rank for backend "auto": which GPU of which machine it
 * would take, and whether two ranks of a job would take the same one
 * (l_distributed.c's agree_on_auto pools the seats through the store). */
#ifndef DP_AUTO_SEAT_H
#define DP_AUTO_SEAT_H

#include <stdbool.h>
#include <stddef.h>

/* "<boot id>/<device>": the machine's boot id (/proc/sys/kernel/random/boot_id, "?" when unreadable) and the
 * device at local_rank, CUDA_VISIBLE_DEVICES's entry there (an index or a UUID), else local_rank itself. */
void dp_auto_seat(int local_rank, char *buf, size_t n);

/* Whether two of seats[0..n) are equal; if so, msg (msg_n bytes) names the lowest rank pair that clashes and
 * their GPU. Seats come from other processes through the store: any string (no '/', empty) is compared and
 * printed safely. */
bool dp_auto_seats_clash(const char *const *seats, int n, char *msg, size_t msg_n);

#endif
