/** The CheckRequest / CheckResponse shapes as proto-loader decodes them (keepCase, enums as numbers). */

export interface HeaderValueOption {
  header: { key: string; value: string };
  append?: { value: boolean };
}

export interface CheckRequest {
  attributes?: {
    source?: {
      address?: { socket_address?: { address?: string; port_value?: number } };
      certificate?: string;
    };
    request?: {
      http?: {
        id?: string;
        method?: string;
        headers?: Record<string, string>;
        header_map?: { headers?: { key: string; value?: string; raw_value?: Buffer }[] };
        path?: string;
        host?: string;
        scheme?: string;
        protocol?: string;
        size?: string | number;
        body?: string;
        raw_body?: Buffer | Uint8Array;
      };
    };
  };
}

export interface CheckResponse {
  status: { code: number; message?: string };
  denied_response?: { status: { code: number }; headers: HeaderValueOption[]; body: string };
  ok_response?: { headers: HeaderValueOption[]; headers_to_remove: string[] };
  dynamic_metadata?: { fields: Record<string, { stringValue: string }> };
}
