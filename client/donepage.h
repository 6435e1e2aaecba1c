/* client/donepage.h — the done page of a CUDA arena (builds with CUDA): a sealed memfd of 2 x 1024
 * uint32 sequence numbers, mapped into both the client and fgbuffd and registered with CUDA in
 * both. The daemon's GPU writes a done number (cuStreamWriteValue32) once a tensor's result is in
 * place and the trainer's stream waits on it (cuStreamWaitValue32 GEQ); the trainer's stream
 * writes the ready number (second half) once the gradient is produced and the daemon's loop reads
 * it. Also the watchdog that keeps a stream wait from hanging when the daemon goes away
 * (docs/protocol.md, "Done on stream memory"). */
#ifndef FGB_CLIENT_DONEPAGE_H
#define FGB_CLIENT_DONEPAGE_H

#include <stddef.h>
#include <stdint.h>

#include "fgbuff/client.h"

#define CLI_PAGE_SLOTS 1024 /* page slot of sequence number s: s % CLI_PAGE_SLOTS */

typedef struct cli_page cli_page;

/* NULL (err says why) when the page cannot be created or registered with CUDA. */
cli_page *cli_page_new(char *err, size_t errlen);
int cli_page_fd(const cli_page *p);
/* The next sequence number (never 0), noted as handed out for its slot. */
uint32_t cli_page_next(cli_page *p);
/* The device address of the slot of sequence number seq; ... of its ready slot (second half). */
uint64_t cli_page_dev(const cli_page *p, uint32_t seq);
uint64_t cli_page_ready_dev(const cli_page *p, uint32_t seq);
/* Host-write seq into its READY slot (second half): the gradient is already produced. */
void cli_page_ready_now(cli_page *p, uint32_t seq);
/* Host-write seq into its slot unless the slot is already at or past it. */
void cli_page_release(cli_page *p, uint32_t seq);
/* ... every slot up to the last number handed out for it. */
void cli_page_release_all(cli_page *p);
/* A stream waits on seq until timeout_ms from now (-1: forever): the watchdog then writes it. */
void cli_page_deadline(cli_page *p, uint32_t seq, int timeout_ms);
/* 1 (and the number) once after the watchdog released a stream wait past its deadline. */
int cli_page_expired(fgb_client *c, uint32_t *seq);
/* Releases everything, stops watching, unregisters and unmaps. NULL is fine. */
void cli_page_free(cli_page *p);
/* Watch p on c's connection: when the daemon's end closes, a thread releases every watched
 * page. Starts the thread on first use. */
fgb_status cli_page_watch(fgb_client *c, cli_page *p);
/* Stops c's watchdog thread (every page must have been freed or be freed after). */
void cli_page_watch_stop(fgb_client *c);

#endif
