{{/*
Names are fixed (cloudburst-worker, cloudburst-trigger, ...): the CRDs, the ClusterRoles and
the Roles in kube-system and kube-public are cluster-wide, so a cluster runs one release, and
the processes and docs name these objects (the trigger's Lease Role, the catalog ConfigMap).
*/}}

{{/* The labels every object carries. */}}
{{- define "cloudburst.labels" -}}
app.kubernetes.io/part-of: cloudburst
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}


{{/* The image: repository, then @digest or :tag (the chart's appVersion when unset). */}}
{{- define "cloudburst.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/*
One setting's value as the environment carries it (worker/settings.py): a list
comma-separated, a map as JSON, anything else as its string.
*/}}
{{- define "cloudburst.settingValue" -}}
{{- if kindIs "slice" . -}}
{{ join "," . }}
{{- else if kindIs "map" . -}}
{{ toJson . }}
{{- else -}}
{{ toString . }}
{{- end -}}
{{- end }}

{{/*
The pod spec both processes share: (dict "root" $ "name" "cloudburst-worker" "component"
"worker" "args" (list "worker") "values" .Values.worker "extraEnv" (list ...)).
*/}}
{{- define "cloudburst.podTemplate" -}}
{{- $root := .root -}}
{{- $v := .values -}}
metadata:
  labels:
    app.kubernetes.io/name: {{ .name }}
    app.kubernetes.io/component: {{ .component }}
    {{- include "cloudburst.labels" $root | nindent 4 }}
    {{- with $root.Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- with $v.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    # A changed ConfigMap rolls the pods: the settings are read at start.
    checksum/config: {{ include (print $root.Template.BasePath "/config.yaml") $root | sha256sum }}
    {{- with $root.Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ .serviceAccount }}
  terminationGracePeriodSeconds: {{ $v.terminationGracePeriodSeconds }}
  {{- with $root.Values.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  {{- with $root.Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml $root.Values.podSecurityContext | nindent 4 }}
  {{- with $root.Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $root.Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $root.Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if $root.Values.topologySpreadConstraints }}
  # Each constraint without a labelSelector counts this Deployment's own pods.
  topologySpreadConstraints:
    {{- range $root.Values.topologySpreadConstraints }}
    {{- $constraint := deepCopy . }}
    {{- if not (hasKey $constraint "labelSelector") }}
    {{- $_ := set $constraint "labelSelector" (dict "matchLabels" (dict "app.kubernetes.io/name" $.name)) }}
    {{- end }}
    {{- toYaml (list $constraint) | nindent 4 }}
    {{- end }}
  {{- end }}
  containers:
    - name: {{ .component }}
      image: {{ include "cloudburst.image" $root }}
      imagePullPolicy: {{ $root.Values.imagePullPolicy }}
      args: {{ toJson .args }}
      envFrom:
        - configMapRef:
            name: cloudburst-config
      {{- $env := concat .extraEnv $v.env }}
      {{- with $env }}
      env:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      ports:
        - name: health
          containerPort: {{ $root.Values.settings.healthPort }}
        - name: metrics
          containerPort: {{ $root.Values.settings.metricsPort }}
        - name: sdk-metrics
          containerPort: {{ $root.Values.settings.sdkMetricsPort }}
      livenessProbe:
        httpGet:
          path: /healthz
          port: health
        initialDelaySeconds: 5
        periodSeconds: 10
        failureThreshold: 3
      readinessProbe:
        httpGet:
          path: /readyz
          port: health
        periodSeconds: 10
        timeoutSeconds: 5
        failureThreshold: 3
      {{- with $v.resources }}
      resources:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $root.Values.securityContext | nindent 8 }}
      volumeMounts:
        - name: temporal
          mountPath: /etc/cloudburst/temporal
          readOnly: true
        - name: payload-keys
          mountPath: /etc/cloudburst/payload-keys
          readOnly: true
        - name: tmp
          mountPath: /tmp
        {{- with $v.extraVolumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
  volumes:
    # Temporal API key and/or mTLS client certificate (keys: api-key, tls.crt, tls.key,
    # ca.crt). Optional unless temporal.secretRequired: a self-hosted Temporal without
    # auth needs none; with it, a missing Secret keeps the pods waiting, saying so.
    - name: temporal
      secret:
        secretName: {{ $root.Values.temporal.secretName }}
        optional: {{ not $root.Values.temporal.secretRequired }}
    - name: tmp
      emptyDir:
        sizeLimit: 64Mi
    # The payload keyring (docs/security.md, "Payload keys"): required, so that no process
    # runs without sealing. `kubectl -n {{ $root.Release.Namespace }} create secret generic
    # {{ $root.Values.payloadKeys.secretName }} --from-literal=keyring="$(cloudburst payload-key create)"`.
    - name: payload-keys
      secret:
        secretName: {{ $root.Values.payloadKeys.secretName }}
        optional: false
        items:
          - key: keyring
            path: keyring
    {{- with $v.extraVolumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}
