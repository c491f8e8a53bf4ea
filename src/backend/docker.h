/* docker.h - what the Docker backend offers beyond backend.h. */
#ifndef AB_BACKEND_DOCKER_H
#define AB_BACKEND_DOCKER_H

#include "backend/backend.h"

#include <jansson.h>

/* The configuration of Docker image `ref` (NULL = the backend's default
 * image), pulled first when the engine lacks it, shaped as the manager
 * records an image of a box: {"ref", "id", "env": ["K=V", ...],
 * "workdir"?, "user"?}. The container's init runs as root PID 1 whatever the
 * image says; the image's Env, WorkingDir and User reach the box's commands
 * only through the manager, which passes them with every exec as it does
 * for images of agentbox's own store. b must be a Docker backend
 * (ab_backend_find(b, "docker")), else AB_E_INVALID. Caller decrefs *out. */
int ab_docker_image_config(ab_backend *b, const char *ref, json_t **out, ab_err **err);

#endif
