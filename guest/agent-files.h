/* Writing the request's files before the run and collecting return files after it. */
#ifndef AGENT_FILES_H
#define AGENT_FILES_H

#include <stddef.h>

#include "agent-request.h"

/* Creates every request file (parents 0755, O_CREAT|O_EXCL|O_NOFOLLOW, exact mode: the caller
 * has set umask 0). Never follows a symlink in any component. -1 with a message on failure. */
int write_request_files(const struct request *req, char *err, size_t errlen);

/* Sends one F frame per return file, in request order. */
void send_return_files(int out_fd, const struct request *req);

#endif
