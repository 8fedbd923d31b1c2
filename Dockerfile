# Tandem's image: Debian 12, built with the project's own scripts (the ones
# CI runs), then only the executables and the shared libraries they load.
#   docker build -t tandem:0.1.0 .
# The Helm chart (deploy/helm/tandem) runs tandem-gateway, tandem-prefill and
# tandem-decode from it, and `tandem make-model` for its synthetic model.

FROM debian:12 AS build
WORKDIR /src
COPY . .
RUN scripts/install_deps.sh \
 && scripts/build.sh \
 && mkdir -p /out/bin \
 && cp build/bin/tandem build/bin/tandem-gateway build/bin/tandem-prefill \
       build/bin/tandem-decode build/bin/tandem-load /out/bin/ \
 && scripts/runtime_packages.sh /out/bin/* > /out/runtime-packages.txt

FROM debian:12-slim
COPY --from=build /out/runtime-packages.txt /tmp/runtime-packages.txt
RUN apt-get update \
 && xargs -a /tmp/runtime-packages.txt apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt \
 && useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin tandem
COPY --from=build /out/bin/ /usr/local/bin/
USER 10001
ENV XDG_CACHE_HOME=/tmp
EXPOSE 50051 50052 8080 9400
ENTRYPOINT []
CMD ["tandem", "up", "--host", "0.0.0.0", "--http-port", "8080"]
