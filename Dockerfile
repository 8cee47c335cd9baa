# syntax=docker/dockerfile:1
# The image every process runs from (deploy/k8s: core, edge, the migration and bootstrap Jobs;
# each names its entry point, bin/services/<kind>.ts). Production dependencies only; no
# development keys, bundles, data, tests or benches (only the directories below are copied, and
# .dockerignore keeps the rest out of the build context). Policy bundles are fetched at run time
# from POLICY_BUNDLE and verified against POLICY_TRUSTED_KEYS (README "Running it as services").
# Not built on the development machine (no container engine there); linted by hadolint in the
# suite (test/deploy/k8s.test.ts).

FROM node:20.18.1-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# argon2 loads its prebuilt binary; nothing is compiled.
RUN npm ci --omit=dev --no-audit --no-fund \
 && npm cache clean --force

FROM node:20.18.1-bookworm-slim AS runtime
WORKDIR /app
# Owned by root and read-only to the process: it cannot change its own code.
COPY --from=deps /app/node_modules ./node_modules
COPY package.json tsconfig.json ./
COPY bin ./bin
COPY shared ./shared
COPY core ./core
COPY edge ./edge
COPY proto ./proto
COPY policy/runtime ./policy/runtime
# A numeric non-root user (Kubernetes runAsNonRoot checks the number).
USER 10001:10001
EXPOSE 8080 9191 9464
CMD ["node", "--import", "tsx", "bin/services/core.ts"]
