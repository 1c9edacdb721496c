/**
 * Where a runtime's interpreter and the sandbox's mounts are inside the image, and the environment
 * the image runs them with: what the runtime table and the image build must agree on.
 */

/** Paths inside the image (absolute within the rootfs). */
export const IN_IMAGE = {
  python312Prefix: "/opt/python3.12",
  python312: "/opt/python3.12/bin/python3.12",
  python312Site: "/opt/python3.12/lib/python3.12/site-packages",
  python313Prefix: "/opt/python3.13",
  python313: "/opt/python3.13/bin/python3.13",
  python313Site: "/opt/python3.13/lib/python3.13/site-packages",
  python311: "/usr/bin/python3.11",
  node20: "/opt/node20/bin/node",
  node24: "/opt/node24/bin/node",
  bash: "/bin/bash",
  mountPoints: ["/home/user", "/run/scratchrun", "/opt/scratchrun"],
} as const;

/** Environment every sandbox should start with (PATH finds python3.12/node, headless plots). */
export const IMAGE_ENV: Readonly<Record<string, string>> = {
  PATH: "/usr/local/bin:/usr/bin:/bin",
  HOME: IN_IMAGE.mountPoints[0],
  LANG: "C.UTF-8",
  MPLBACKEND: "Agg",
};
