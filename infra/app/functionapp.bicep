// The Function App: Flex Consumption (FC1), Linux, Python 3.11, one user-assigned identity.
//
// App settings come in two groups:
//   * the host's own (AzureWebJobsStorage__*, APPLICATIONINSIGHTS_*), and
//   * exactly the names vault_app/config.py reads: its PLAIN_SETTINGS plus the identity-based
//     connections VaultStorage__* and VaultStaging<i>__* (identity_setting_names(count)).
// Every storage connection is identity-based (serviceUri + credential + clientId); no key,
// no connection string, no listKeys(). tests/test_infra.py keeps this list and config.py in step.

@description('Name of the Function App.')
param name string

@description('Name of the Flex Consumption plan.')
param planName string

@description('Azure region of the plan and the app.')
param location string

@description('Tags applied to the plan and the app (the app also gets azd-service-name).')
param tags object

@description('Service name in azure.yaml; azd finds the app to deploy to by this tag.')
param serviceName string

@description('Resource id of the user-assigned identity the app runs as.')
param identityId string

@description('Client id of the user-assigned identity (the __clientId of every connection).')
param identityClientId string

@description('Name of the Application Insights component.')
param appInsightsName string

@description('Host storage account (AzureWebJobsStorage and the deployment container).')
param hostAccountName string

@description('Blob container in the host account that holds the deployed package.')
param deploymentContainerName string

@description('Vault storage account (stream page blobs, claim-checks, tables).')
param vaultAccountName string

@description('Staging storage accounts, in order: account i is the connection VaultStaging<i>.')
@minLength(1)
param stagingAccountNames array

@minValue(1)
@description('Staging queues per staging account (VAULT_STAGING_QUEUES).')
param stagingQueueCount int

@description('Staging queue name prefix (VAULT_QUEUE_PREFIX).')
param queuePrefix string

@description('Stream page blob container (VAULT_STREAMS_CONTAINER).')
param streamsContainerName string

@description('Claim-check container (VAULT_CLAIMCHECK_CONTAINER).')
param claimCheckContainerName string

@description('Table name prefix (VAULT_TABLE_PREFIX).')
param tablePrefix string

@minValue(1)
@description('Largest accepted message in bytes (VAULT_MAX_MESSAGE_BYTES).')
param maxMessageBytes int

@minValue(1)
@description('Most messages in one produce request (VAULT_MAX_BATCH_MESSAGES).')
param maxBatchMessages int

@minValue(1)
@description('Largest produce request body in bytes (VAULT_MAX_BATCH_BYTES).')
param maxBatchBytes int

@minValue(1)
@description('Lifetime in minutes of the user-delegation SAS URLs the consume API hands out (VAULT_SAS_MINUTES).')
param sasMinutes int

@allowed(['1', '2'])
@description('Record format of new commits (VAULT_RECORD_FORMAT): 2, compressed units; 1, one record per message.')
param recordFormat string

@allowed(['zstd', 'lz4', 'none'])
@description('Codec of format 2 units (VAULT_RECORD_CODEC).')
param recordCodec string

@description('Entra tenant whose access tokens the API accepts (VAULT_AUTH_TENANT_ID); empty with no audience.')
param authTenantId string

@description('Token issuers instead of the tenant\'s, comma-separated (VAULT_AUTH_ISSUER): other clouds. Empty: the tenant\'s v2.0 and v1.0 issuers.')
param authIssuers string = ''

@description('Accepted token audiences, comma-separated (VAULT_AUTH_AUDIENCE): the app registration\'s client id and App ID URI. Empty: no bearer tokens.')
param authAudiences string

@secure()
@description('Named function keys the app itself checks, JSON {"name": "secret"} (VAULT_FUNCTION_KEYS). Empty: none.')
param functionKeys string

@description('The access policy, JSON {"grants": [...]} (VAULT_ACCESS_POLICY); docs/SECURITY.md.')
param accessPolicy string

@description('Stream patterns anyone may read without a credential, comma-separated (VAULT_ANONYMOUS_READ).')
param anonymousReadPatterns string

@description('Put App Service Authentication (Easy Auth) before the app for the app registration authClientId, and trust its X-MS-CLIENT-PRINCIPAL header (VAULT_EASY_AUTH). Without authClientId it stays off: the header is then whatever a client sent.')
param easyAuth bool

@description('Client id of the app registration whose tokens Easy Auth validates (with easyAuth); empty: none.')
param authClientId string = ''

@description('Subnet for VNet integration (vnetEnabled): all the app\'s outbound traffic goes through it. Empty: none.')
param appSubnetId string = ''

@minValue(1)
@maxValue(1000)
@description('Upper bound on the number of instances Flex Consumption may run for this app.')
param maximumInstanceCount int

@allowed([
  512
  2048
  4096
])
@description('Memory of each instance in MB.')
param instanceMemoryMB int

var storageSuffix = environment().suffixes.storage
// Easy Auth only together with its configuration below: VAULT_EASY_AUTH=true alone would make
// the app trust an X-MS-CLIENT-PRINCIPAL header that nothing in front of it sets or strips.
var easyAuthOn = easyAuth && !empty(authClientId)
var stagingAccountCount = length(stagingAccountNames)

// The Functions host's own storage, identity-based.
var hostSettings = [
  {
    name: 'AzureWebJobsStorage__credential'
    value: 'managedidentity'
  }
  {
    name: 'AzureWebJobsStorage__clientId'
    value: identityClientId
  }
  {
    name: 'AzureWebJobsStorage__blobServiceUri'
    value: 'https://${hostAccountName}.blob.${storageSuffix}'
  }
  {
    name: 'AzureWebJobsStorage__queueServiceUri'
    value: 'https://${hostAccountName}.queue.${storageSuffix}'
  }
  {
    name: 'AzureWebJobsStorage__tableServiceUri'
    value: 'https://${hostAccountName}.table.${storageSuffix}'
  }
  {
    // The connection string only locates the component (it holds no secret that matters:
    // local auth is disabled); the authentication string makes the SDK send an Entra ID token.
    // Both are read by the host and by the app's own OpenTelemetry distro (docs/OPERATING.md).
    name: 'APPLICATIONINSIGHTS_CONNECTION_STRING'
    value: appInsights.properties.ConnectionString
  }
  {
    name: 'APPLICATIONINSIGHTS_AUTHENTICATION_STRING'
    value: 'Authorization=AAD;ClientId=${identityClientId}'
  }
]

// vault_app.config.PLAIN_SETTINGS
var plainSettings = [
  {
    name: 'VAULT_STAGING_ACCOUNTS'
    value: string(stagingAccountCount)
  }
  {
    name: 'VAULT_STAGING_QUEUES'
    value: string(stagingQueueCount)
  }
  {
    name: 'VAULT_QUEUE_PREFIX'
    value: queuePrefix
  }
  {
    name: 'VAULT_STREAMS_CONTAINER'
    value: streamsContainerName
  }
  {
    name: 'VAULT_CLAIMCHECK_CONTAINER'
    value: claimCheckContainerName
  }
  {
    name: 'VAULT_TABLE_PREFIX'
    value: tablePrefix
  }
  {
    name: 'VAULT_MAX_MESSAGE_BYTES'
    value: string(maxMessageBytes)
  }
  {
    name: 'VAULT_MAX_BATCH_MESSAGES'
    value: string(maxBatchMessages)
  }
  {
    name: 'VAULT_MAX_BATCH_BYTES'
    value: string(maxBatchBytes)
  }
  {
    name: 'VAULT_SAS_MINUTES'
    value: string(sasMinutes)
  }
  {
    name: 'VAULT_RECORD_FORMAT'
    value: recordFormat
  }
  {
    name: 'VAULT_RECORD_CODEC'
    value: recordCodec
  }
  // Access control (docs/SECURITY.md): the app checks every request itself.
  {
    name: 'VAULT_AUTH_TENANT_ID'
    value: authTenantId
  }
  {
    name: 'VAULT_AUTH_ISSUER'
    value: authIssuers
  }
  {
    name: 'VAULT_AUTH_AUDIENCE'
    value: authAudiences
  }
  {
    name: 'VAULT_FUNCTION_KEYS'
    value: functionKeys
  }
  {
    name: 'VAULT_ACCESS_POLICY'
    value: accessPolicy
  }
  {
    name: 'VAULT_ANONYMOUS_READ'
    value: anonymousReadPatterns
  }
  {
    name: 'VAULT_EASY_AUTH'
    value: string(easyAuthOn)
  }
]

// Connection "VaultStorage": the vault account.
var vaultSettings = [
  {
    name: 'VaultStorage__blobServiceUri'
    value: 'https://${vaultAccountName}.blob.${storageSuffix}'
  }
  {
    name: 'VaultStorage__tableServiceUri'
    value: 'https://${vaultAccountName}.table.${storageSuffix}'
  }
  {
    name: 'VaultStorage__credential'
    value: 'managedidentity'
  }
  {
    name: 'VaultStorage__clientId'
    value: identityClientId
  }
]

// Connections "VaultStaging0" .. "VaultStaging<n-1>": one group of settings per staging account.
var stagingSettingsPerAccount = [for i in range(0, stagingAccountCount): [
  {
    name: 'VaultStaging${i}__queueServiceUri'
    value: 'https://${stagingAccountNames[i]}.queue.${storageSuffix}'
  }
  {
    name: 'VaultStaging${i}__credential'
    value: 'managedidentity'
  }
  {
    name: 'VaultStaging${i}__clientId'
    value: identityClientId
  }
]]
var stagingSettings = flatten(stagingSettingsPerAccount)

resource appInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: appInsightsName
}

resource plan 'Microsoft.Web/serverfarms@2024-04-01' = {
  name: planName
  location: location
  tags: tags
  kind: 'functionapp'
  sku: {
    tier: 'FlexConsumption'
    name: 'FC1'
  }
  properties: {
    // Linux.
    reserved: true
  }
}

resource app 'Microsoft.Web/sites@2024-04-01' = {
  name: name
  location: location
  tags: union(tags, {
    'azd-service-name': serviceName
  })
  kind: 'functionapp,linux'
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${identityId}': {}
    }
  }
  properties: {
    serverFarmId: plan.id
    httpsOnly: true
    // Isolated: outbound through the VNet, where the storage accounts' private endpoints are.
    virtualNetworkSubnetId: empty(appSubnetId) ? null : appSubnetId
    siteConfig: {
      minTlsVersion: '1.2'
      ftpsState: 'Disabled'
      appSettings: concat(hostSettings, plainSettings, vaultSettings, stagingSettings)
    }
    functionAppConfig: {
      deployment: {
        storage: {
          type: 'blobContainer'
          value: 'https://${hostAccountName}.blob.${storageSuffix}/${deploymentContainerName}'
          authentication: {
            type: 'UserAssignedIdentity'
            userAssignedIdentityResourceId: identityId
          }
        }
      }
      scaleAndConcurrency: {
        // Correctness does not depend on this bound: each stream's page blob is only appended
        // to under its blob lease, so two writers can never interleave a stream. The bound is
        // about efficiency: per-function scaling gives the queue-triggered writer its own
        // instances, and without a cap a deep backlog would start many writers that mostly
        // wait for (and fight over) the same few leases. host.json sets the queue trigger's
        // batchSize=1 and newBatchThreshold=0, so each instance runs one writer invocation at
        // a time and the number of concurrent writers is at most this count.
        maximumInstanceCount: maximumInstanceCount
        instanceMemoryMB: instanceMemoryMB
      }
      runtime: {
        name: 'python'
        version: '3.11'
      }
    }
  }
}

// App Service Authentication ("Easy Auth"), with easyAuth and an app registration: it validates
// Entra ID tokens of the registration, and sets X-MS-CLIENT-PRINCIPAL (stripping any a client
// sent). Unauthenticated requests go on to the app, which still takes its function keys and
// serves anonymous reads (VAULT_ANONYMOUS_READ); it refuses the rest itself (docs/SECURITY.md).
resource easyAuthSettings 'Microsoft.Web/sites/config@2024-04-01' = if (easyAuthOn) {
  parent: app
  name: 'authsettingsV2'
  properties: {
    platform: {
      enabled: true
    }
    globalValidation: {
      requireAuthentication: false
      unauthenticatedClientAction: 'AllowAnonymous'
    }
    httpSettings: {
      requireHttps: true
    }
    identityProviders: {
      azureActiveDirectory: {
        enabled: true
        registration: {
          clientId: authClientId
          openIdIssuer: '${environment().authentication.loginEndpoint}${authTenantId}/v2.0'
        }
        validation: {
          allowedAudiences: [
            authClientId
            'api://${authClientId}'
          ]
        }
      }
    }
    login: {
      tokenStore: {
        enabled: false
      }
    }
  }
}

// Keyless deployment too: no FTP or basic-auth SCM publishing (azd deploys with Entra ID).
resource ftpPublishing 'Microsoft.Web/sites/basicPublishingCredentialsPolicies@2024-04-01' = {
  parent: app
  name: 'ftp'
  properties: {
    allow: false
  }
}

resource scmPublishing 'Microsoft.Web/sites/basicPublishingCredentialsPolicies@2024-04-01' = {
  parent: app
  name: 'scm'
  properties: {
    allow: false
  }
}

output name string = app.name
output defaultHostName string = app.properties.defaultHostName
